package leasehold

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// AcquireOption configures Acquire (and Campaign, which takes WithTTL,
// WithWait and WithMargin).
type AcquireOption func(*acquireOptions) error

type acquireOptions struct {
	ttl       time.Duration
	wait      time.Duration
	waitSet   bool
	holder    *string
	margin    time.Duration
	marginSet bool
	lockDelay time.Duration
	limit     uint32
	ttlAuto   bool
}

// WithTTL is the lease's TTL (within the broker's bounds: 500 ms to 1 h
// unless configured). Default: the broker's (10 s unless configured).
func WithTTL(d time.Duration) AcquireOption {
	return func(o *acquireOptions) error {
		if d < time.Millisecond {
			return fmt.Errorf("leasehold: WithTTL(%v): at least a millisecond", d)
		}
		o.ttl = d
		return nil
	}
}

// WithTTLAuto lets the broker choose the TTL from the heartbeat round
// trips it measured: 10 times their 99th percentile, at least its
// --ttl-auto-floor (10 s unless configured), within its --ttl-min and
// --ttl-max. The grant's TTL is chosen from the round trips of the
// caller's tenant's streams on that broker (the floor when there are
// none); the lease's heartbeats then renew it for the TTL the broker
// suggests for this client's own stream, so that the TTL follows the
// latency: Lease.TTL, Lease.Deadline and the heartbeat interval change
// with it. Not with WithTTL; not for Campaign. A broker from before
// ttl_auto gives its default TTL.
func WithTTLAuto() AcquireOption {
	return func(o *acquireOptions) error {
		o.ttlAuto = true
		return nil
	}
}

// WithWait bounds how long to wait for the lock when it is held: 0 tries
// once (a try never jumps the line). Without it, Acquire waits as long as
// its context allows (without end if the context has no deadline). A wait
// longer than the broker's --max-wait is a chain of calls, each waiting in
// the place in line the one before kept, so that nobody who came later
// overtakes it.
func WithWait(d time.Duration) AcquireOption {
	return func(o *acquireOptions) error {
		if d < 0 {
			return fmt.Errorf("leasehold: WithWait(%v) must not be negative", d)
		}
		o.wait, o.waitSet = d, true
		return nil
	}
}

// WithHolder is the label Describe shows. Default: hostname:pid.
func WithHolder(holder string) AcquireOption {
	return func(o *acquireOptions) error {
		o.holder = &holder
		return nil
	}
}

// WithMargin is how long before the broker could expire the lease it
// counts as lost here (Done closes): time for the application to stop
// writing. Default: a tenth of the TTL; at most the TTL.
func WithMargin(d time.Duration) AcquireOption {
	return func(o *acquireOptions) error {
		if d < 0 {
			return fmt.Errorf("leasehold: WithMargin(%v) must not be negative", d)
		}
		o.margin, o.marginSet = d, true
		return nil
	}
}

// WithLockDelay: if this lease ends involuntarily (expiry, revocation),
// nobody gets the lock for this long afterwards.
func WithLockDelay(d time.Duration) AcquireOption {
	return func(o *acquireOptions) error {
		if d < 0 {
			return fmt.Errorf("leasehold: WithLockDelay(%v) must not be negative", d)
		}
		o.lockDelay = d
		return nil
	}
}

// WithLimit > 1 makes the name a semaphore with that many permits (every
// caller of the name must use the same limit).
func WithLimit(n uint32) AcquireOption {
	return func(o *acquireOptions) error {
		o.limit = n
		return nil
	}
}

// DefaultHolder is hostname:pid, so that an operator can find the holder.
func DefaultHolder() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "unknown"
	}
	return h + ":" + strconv.Itoa(os.Getpid())
}

func millis(d time.Duration) uint64 {
	return uint64((d + time.Millisecond/2) / time.Millisecond)
}

// acquireOptions applies opts, for Acquire and Campaign, once the client is
// known to be open.
func (c *Client) acquireOptions(opts []AcquireOption) (acquireOptions, error) {
	var o acquireOptions
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	if o.ttlAuto && o.ttl != 0 {
		return o, errors.New("leasehold: WithTTL and WithTTLAuto: a TTL is either given or chosen by the broker")
	}
	return o, c.check()
}

// Acquire takes the lease on name, waiting for it while it is held: as
// long as ctx allows, or WithWait. It returns an error matching
// ErrNotAcquired (an *Error saying who holds it) when the wait ran out
// (or at once with WithWait(0)), ctx's error when ctx was cancelled (the
// broker then drops the call's place in line, and releases a grant that
// crossed the cancellation; a deadline that passed first gives an error
// matching both ErrNotAcquired and context.DeadlineExceeded), and other
// *Errors for other refusals (e.g.
// INVALID_ARGUMENT for a TTL outside the broker's bounds).
//
// A wait bounded by ctx's deadline ends a little before it (a tenth of the
// time left, at most a second), so that the broker's answer saying who
// holds the lock arrives in time.
//
// The lease's local deadline is the time the granting call was sent + the
// time the broker says it waited + its TTL - its margin.
func (c *Client) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	o, err := c.acquireOptions(opts)
	if err != nil {
		return nil, err
	}
	holder := DefaultHolder()
	if o.holder != nil {
		holder = *o.holder
	}
	send := func(ctx context.Context, s pb.LeaseholdServiceClient, wait time.Duration, keepPlace bool, place string, trailer *metadata.MD) (*pb.Lease, uint64, error) {
		req := &pb.AcquireRequest{Name: name, TtlMs: millis(o.ttl), Holder: holder, WaitTimeoutMs: millis(wait),
			LockDelayMs: millis(o.lockDelay), Limit: o.limit, KeepPlace: keepPlace, Place: place, TtlAuto: o.ttlAuto}
		r, err := s.Acquire(ctx, req, grpc.Trailer(trailer))
		return r.GetLease(), r.GetWaitedMs(), err
	}
	return c.chain(ctx, fmt.Sprintf("acquire %q", name), o, send)
}

type sendFunc func(ctx context.Context, s pb.LeaseholdServiceClient, wait time.Duration, keepPlace bool, place string, trailer *metadata.MD) (*pb.Lease, uint64, error)

// servedFor: a call answered "unavailable" later than this after it was
// sent had been waiting on that broker (served until its shutdown), not
// turned away on arrival: the replica it moves to starts a new round.
const servedFor = time.Second

// chain makes the calls of one acquire or campaign, each within the
// broker's --max-wait.
//
// A wait longer than --max-wait (or without end) is a chain of waiting
// calls, one after the other. Each but the last asks the broker to keep its
// place in line when its wait runs out (keep_place): the ABORTED answer
// then carries the place (leasehold-place), which the broker keeps for 3 s,
// and the next call, sent at once, waits in it, in the same position. The
// last call of a finite wait keeps nothing: its caller gives up.
//
// A broker's graceful shutdown ends a waiting call with UNAVAILABLE,
// keeping its place too: the next call waits in it on the next replica.
// Moving on stops when a whole round of replicas, one after the other,
// could not be reached or was shutting down.
func (c *Client) chain(ctx context.Context, op string, o acquireOptions, send sendFunc) (*Lease, error) {
	start := time.Now()
	var end time.Time // zero: without end
	if o.waitSet {
		end = start.Add(o.wait)
	}
	if dl, ok := ctx.Deadline(); ok {
		grace := time.Until(dl) / 10
		if grace > time.Second {
			grace = time.Second
		}
		if e := dl.Add(-grace); end.IsZero() || e.Before(end) {
			end = e
		}
	}
	place := ""
	unserved := 0
	n := len(c.brokers.stubs)
	for {
		now := time.Now()
		maxWait := time.Duration(atomic.LoadInt64(&c.maxWait))
		segment := maxWait
		last := false
		if !end.IsZero() {
			left := end.Sub(now)
			if left < 0 {
				left = 0
			}
			if left <= segment {
				segment, last = left, true
			}
		}
		idx, stub := c.brokers.current()
		callCtx, cancel := c.callCtx(ctx, segment)
		var trailer metadata.MD
		sent := time.Now()
		lease, waited, err := send(callCtx, stub, segment, !last, place, &trailer)
		cancel()
		if err == nil {
			l := c.hold(lease, waited, sent, o)
			l.waited += sent.Sub(start)
			return l, nil
		}
		if ctx.Err() == context.DeadlineExceeded {
			return nil, &deadlineError{op}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("leasehold: %s: %w", op, ctx.Err())
		}
		err = toError(err, op, trailer)
		var e *Error
		if !errors.As(err, &e) {
			return nil, err
		}
		after := time.Now()
		switch {
		case e.Code == codes.Unavailable && e.fromBroker():
			// The broker is shutting down (or its store did not answer):
			// any replica can serve the wait, in the place it kept.
			if e.place != "" {
				place = e.place
			}
			if after.Sub(sent) >= servedFor {
				unserved = 0 // it was waiting there: a new round starts
			}
			if unserved+1 < n {
				unserved++
				c.brokers.moveOn(idx, "shutting down")
				continue
			}
			return nil, e
		case e.Code == codes.Aborted:
			if last || (!end.IsZero() && !after.Before(end)) {
				return nil, e
			}
			unserved = 0
			if e.place != "" {
				place = e.place // its wait ran out; the next call waits there
				continue
			}
			if after.Sub(sent) >= segment*9/10 {
				continue // a broker from before keep_place: join at the back
			}
			return nil, e
		case e.Code == codes.InvalidArgument && e.Metadata["argument"] == "wait":
			if learnt, ok := e.ms("max_wait_ms"); ok && learnt > 0 && learnt < maxWait {
				atomic.StoreInt64(&c.maxWait, int64(learnt))
				continue
			}
			return nil, e
		case c.brokers.unreachable(idx, e) && unserved+1 < n:
			unserved++
			c.brokers.moveOn(idx, "unreachable")
			continue
		}
		return nil, e
	}
}

// hold makes the Lease of a grant and gives it to the keeper. Its deadline
// counts from the time the granting call was sent, plus the time the broker
// says it waited (the grant happened no sooner), less the margin.
func (c *Client) hold(l *pb.Lease, waitedMs uint64, sent time.Time, o acquireOptions) *Lease {
	ttl := ms(l.TtlMs)
	margin := ttl / 10
	if o.marginSet {
		margin = o.margin
		if margin > ttl {
			margin = ttl
		}
	}
	waited := ms(waitedMs)
	lease := newLease(c, l.Name, l.OwnerToken, l.Fence, ttl, margin, waited, sent.Add(waited+ttl-margin), o.ttlAuto, o.marginSet)
	c.keeper.add(lease)
	return lease
}

// deadlineError: the context's deadline passed before the lock was
// obtained (the broker's own refusal did not arrive first). It matches
// both ErrNotAcquired and context.DeadlineExceeded.
type deadlineError struct{ op string }

func (e *deadlineError) Error() string {
	return "leasehold: " + e.op + ": not acquired before the context's deadline"
}

func (e *deadlineError) Is(target error) bool { return target == ErrNotAcquired }

func (e *deadlineError) Unwrap() error { return context.DeadlineExceeded }
