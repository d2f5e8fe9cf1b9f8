package leasehold

import (
	"context"
	"errors"
	"io"
	"math/rand"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// The heartbeat rules of the Rust, Python and Node.js clients:
//
//   - one KeepAlive stream per client, and on it one heartbeat every third
//     of the shortest TTL, naming every live lease (several heartbeats when
//     more than the broker's --max-stream-leases);
//   - each renewal moves a lease's local deadline to (heartbeat *send* time
//   - granted TTL - margin), so latency can only make it early;
//   - a lease is lost when the broker answers LOST (or REJECTED), or when
//     its local deadline passes without a confirmation (the lease's own
//     timer), whatever the broker says later;
//   - a broken or stalled stream is reopened with jittered backoff, never
//     longer than a heartbeat interval, on the next broker replica if this
//     one is gone, and the leases resume by owner token;
//   - a lease past its local deadline is released in the background;
//   - each heartbeat reports the round trip of the last one answered on its
//     stream (from sending it to reading its answer), by which the broker
//     judges the stream's TTLs (TTLAdvice) and chooses auto TTLs
//     (WithTTLAuto); a lease acquired WithTTLAuto is renewed for the TTL
//     the broker suggests, and its deadline, and the heartbeat interval,
//     follow the TTL each answer applied.
const (
	minBackoff      = 50 * time.Millisecond
	maxBackoff      = 2 * time.Second
	minInterval     = 50 * time.Millisecond
	maxBacklog      = 4
	heartbeatLeases = 1000
)

type keeper struct {
	c *Client

	mu     sync.Mutex
	leases map[string]*Lease // by owner token

	advice *adviceBox

	wake   chan struct{}
	events chan streamEvent
	quit   chan struct{}
	exited chan struct{}
	once   sync.Once
}

// streamEvent is news from a KeepAlive stream of generation gen: an
// answer, or its end (err nil: ended cleanly).
type streamEvent struct {
	gen   int
	index int
	resp  *pb.KeepAliveResponse
	at    time.Time // when the answer was read
	ended bool
	err   error
}

type beat struct {
	sent   time.Time
	leases []*Lease
}

func newKeeper(c *Client, onAdvice func(TTLAdvice)) *keeper {
	k := &keeper{c: c, leases: map[string]*Lease{}, wake: make(chan struct{}, 1),
		events: make(chan streamEvent, 16), quit: make(chan struct{}), exited: make(chan struct{})}
	k.advice = newAdviceBox(onAdvice, k.quit)
	go k.run()
	return k
}

func (k *keeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

func (k *keeper) add(l *Lease) {
	k.mu.Lock()
	k.leases[l.token] = l
	k.mu.Unlock()
	k.poke()
}

func (k *keeper) forget(l *Lease) {
	k.mu.Lock()
	if k.leases[l.token] == l {
		delete(k.leases, l.token)
	}
	k.mu.Unlock()
}

// lost: l's deadline timer found it lost; the keeper forgets it.
func (k *keeper) lost(l *Lease) {
	k.forget(l)
	k.poke()
}

func (k *keeper) snapshot() []*Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*Lease, 0, len(k.leases))
	for _, l := range k.leases {
		out = append(out, l)
	}
	return out
}

func (k *keeper) close() {
	k.once.Do(func() { close(k.quit) })
	<-k.exited
}

// live is the leases still held at now; the ended ones are forgotten, and
// those past their deadline lost (their timer may not have run yet).
func (k *keeper) live(now time.Time) []*Lease {
	var live []*Lease
	for _, l := range k.snapshot() {
		if l.ended() {
			k.forget(l)
			continue
		}
		if !now.Before(l.Deadline()) {
			l.expire()
			continue
		}
		live = append(live, l)
	}
	return live
}

func interval(live []*Lease) time.Duration {
	if len(live) == 0 {
		return time.Second
	}
	shortest := live[0].TTL()
	for _, l := range live[1:] {
		if ttl := l.TTL(); ttl < shortest {
			shortest = ttl
		}
	}
	if d := shortest / 3; d > minInterval {
		return d
	}
	return minInterval
}

func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.5 + rand.Float64()))
}

// kaStream is one KeepAlive stream: heartbeats go through sendq to a
// goroutine that sends them (a full flow-control window must not block
// the keeper); another reads the answers and posts them as events.
type kaStream struct {
	gen    int
	index  int
	sendq  chan *pb.KeepAliveRequest
	cancel context.CancelFunc
	closed bool
}

func (k *keeper) open(gen int) *kaStream {
	index, stub := k.c.brokers.current()
	ctx, cancel := context.WithCancel(context.Background())
	s := &kaStream{gen: gen, index: index, sendq: make(chan *pb.KeepAliveRequest, 64), cancel: cancel}
	post := func(ev streamEvent) {
		select {
		case k.events <- ev:
		case <-k.exited:
		case <-ctx.Done():
		}
	}
	go func() {
		defer cancel()
		stream, err := stub.KeepAlive(ctx)
		if err != nil {
			post(streamEvent{gen: gen, index: index, ended: true, err: toError(err, "KeepAlive", nil)})
			return
		}
		go func() {
			for {
				select {
				case req, ok := <-s.sendq:
					if !ok {
						_ = stream.CloseSend()
						return
					}
					if stream.Send(req) != nil {
						return // Recv returns the stream's error
					}
				case <-ctx.Done():
					return
				}
			}
		}()
		for {
			resp, err := stream.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return // let go of
				}
				ev := streamEvent{gen: gen, index: index, ended: true}
				if !errors.Is(err, io.EOF) {
					ev.err = toError(err, "KeepAlive", nil)
				}
				post(ev)
				return
			}
			post(streamEvent{gen: gen, index: index, resp: resp, at: time.Now()})
		}
	}()
	return s
}

func (s *kaStream) halfClose() {
	if !s.closed {
		s.closed = true
		close(s.sendq)
	}
}

func (k *keeper) run() {
	defer close(k.exited)
	var (
		st          *kaStream
		gen         int
		seq         uint64
		pending     = map[uint64]beat{}
		nextBeat    time.Time
		reconnectAt time.Time
		backoffD    = minBackoff
		timer       = time.NewTimer(time.Hour)
		// The stream's last measured round trip (0: none yet), and whether
		// its advice was logged: both belong to one stream.
		lastRTT time.Duration
		advised bool
		// lastBeat: when the last heartbeats were sent.
		lastBeat time.Time
	)
	letGo := func(cancel bool) {
		if cancel {
			st.cancel()
		} else {
			st.halfClose()
		}
		st = nil
		pending = map[uint64]beat{}
	}
	for {
		now := time.Now()
		live := k.live(now)
		if st != nil && !now.Before(nextBeat) && len(live) > 0 && stuck(pending, len(st.sendq), live, now) {
			// Answers stopped coming (or the stream stopped taking
			// heartbeats): a stream that looks open but carries nothing.
			letGo(true)
			reconnectAt = now
		}
		if st == nil && len(live) > 0 && !now.Before(reconnectAt) {
			gen++
			st = k.open(gen)
			lastRTT, advised = 0, false
			nextBeat = now // at once: after a reconnection this resumes the leases
		}
		if st != nil && !now.Before(nextBeat) {
			if len(live) == 0 {
				letGo(false) // a clean end, not a loss
			} else {
				for i := 0; i < len(live); i += heartbeatLeases {
					chunk := live[i:minInt(i+heartbeatLeases, len(live))]
					seq++
					req := &pb.KeepAliveRequest{Seq: seq, LastRoundTripUs: uint64(lastRTT / time.Microsecond)}
					for _, l := range chunk {
						req.Leases = append(req.Leases, &pb.LeaseRef{Name: l.name, OwnerToken: l.token, TtlAuto: l.auto})
					}
					select {
					case st.sendq <- req:
						pending[seq] = beat{sent: now, leases: chunk}
					default: // the backlog shows it: stuck at the next beat
					}
				}
				lastBeat = now
				nextBeat = now.Add(interval(live))
			}
		}
		// Sleep until the next thing to do: a heartbeat, a reconnection, or
		// the nearest local deadline (to forget the lease then).
		var until time.Time
		if len(live) > 0 {
			until = reconnectAt
			if st != nil {
				until = nextBeat
			}
			for _, l := range live {
				if d := l.Deadline(); d.Before(until) {
					until = d
				}
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if !until.IsZero() {
			timer.Reset(time.Until(until))
		}
		select {
		case <-k.quit:
			if st != nil {
				letGo(true)
			}
			return
		case <-k.wake:
			// A new lease may have a shorter TTL than the current beat
			// allows for. Not beaten at once: its deadline counts from its
			// grant.
			if st != nil {
				if next := time.Now().Add(interval(k.snapshot())); next.Before(nextBeat) {
					nextBeat = next
				}
			}
		case ev := <-k.events:
			if st == nil || ev.gen != st.gen {
				continue // a stream let go of
			}
			if !ev.ended {
				backoffD = minBackoff // the stream works
				if b, ok := pending[ev.resp.Seq]; ok {
					if rtt := ev.at.Sub(b.sent); rtt > 0 {
						lastRTT = rtt
					}
				}
				k.answered(pending, ev.resp)
				// An auto lease's TTL can shrink at a renewal (its stream's
				// round trips improved, or the grant was fitted to other
				// streams'): the next beat comes a third of the new TTL
				// after the last, not of the old.
				if next := lastBeat.Add(interval(k.snapshot())); next.Before(nextBeat) {
					nextBeat = next
				}
				advised = k.advised(ev.resp.Advice, advised, st.index)
				continue
			}
			var e *Error
			if errors.As(ev.err, &e) && e.Code == codes.Unavailable {
				// Unreachable, or the broker shutting down: resume the
				// leases on the next replica (any can renew them: they
				// share the store).
				k.c.brokers.moveOn(ev.index, "unavailable")
			}
			letGo(false)
			delay := jitter(backoffD)
			if iv := interval(k.snapshot()); iv < delay {
				delay = iv
			}
			reconnectAt = time.Now().Add(delay)
			if backoffD *= 2; backoffD > maxBackoff {
				backoffD = maxBackoff
			}
		case <-timer.C:
		}
	}
}

// advised passes on an answer's advice (nil: none); it is logged once per
// stream (logged says whether it was), and returns whether it was now.
func (k *keeper) advised(a *pb.TtlAdvice, logged bool, index int) bool {
	if a == nil {
		k.advice.set(nil)
		return logged
	}
	advice := adviceFrom(a)
	k.advice.set(&advice)
	if !logged {
		// The broker's sentence has the figures (p99, shortest and
		// suggested TTL); WithTTLAuto is this client's word for ttl_auto.
		k.c.logger.Printf("leasehold: TTL advice from broker %s (WithTTLAuto lets it choose): %s", k.c.brokers.targets[index], advice.Message)
	}
	return true
}

func minInt(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// stuck: the oldest heartbeat has waited more than two intervals (and a
// second) for its answer, or the stream is not taking heartbeats.
func stuck(pending map[uint64]beat, backlog int, live []*Lease, now time.Time) bool {
	limit := 2 * interval(live)
	if limit < time.Second {
		limit = time.Second
	}
	for _, b := range pending {
		if now.Sub(b.sent) > limit {
			return true
		}
	}
	return backlog > maxBacklog*((len(live)+heartbeatLeases-1)/heartbeatLeases)
}

// answered applies a KeepAliveResponse: renews the leases it confirms,
// loses those it reports gone.
func (k *keeper) answered(pending map[uint64]beat, resp *pb.KeepAliveResponse) {
	b, ok := pending[resp.Seq]
	if !ok {
		return
	}
	// Answers come in order: older heartbeats still pending got none.
	for s := range pending {
		if s <= resp.Seq {
			delete(pending, s)
		}
	}
	now := time.Now()
	for i, status := range resp.Leases {
		if i >= len(b.leases) {
			break
		}
		l := b.leases[i]
		if status.Name != l.name || l.ended() {
			continue
		}
		var reason LossReason
		switch status.State {
		case pb.LeaseStatus_STATE_ALIVE:
			l.renewed(b.sent, ms(status.TtlMs))
			continue
		case pb.LeaseStatus_STATE_REJECTED:
			reason = LossExpired
		case pb.LeaseStatus_STATE_LOST:
			switch status.Reason {
			case pb.LossReason_LOSS_REASON_NOT_OWNER:
				reason = LossNotOwner
			case pb.LossReason_LOSS_REASON_STORE_LOST:
				reason = LossStoreLost
			case pb.LossReason_LOSS_REASON_REVOKED:
				reason = LossRevoked
			default:
				// Expired (or unspecified) but gone before our own, early,
				// deadline: it cannot have expired, so the store lost it.
				// The broker cannot always tell (a new stream's first
				// heartbeat); we can.
				reason = LossExpired
				if now.Before(l.Deadline()) {
					reason = LossStoreLost
				}
			}
		default: // UNCONFIRMED (the store did not answer), UNSPECIFIED
			continue
		}
		if l.lose(reason, status.Message) {
			k.forget(l)
		}
	}
}
