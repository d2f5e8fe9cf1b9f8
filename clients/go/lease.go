package leasehold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lease is a held lease, renewed in the background by its Client until it
// is released or lost. Its methods are safe for concurrent use.
//
// Attach Fence to every write made under the lease and have the storage
// refuse writes with a lower fence than one it already accepted: a lease
// alone cannot stop a holder that was paused past its TTL, a fence checked
// by the storage can (GuardedUpdate, GuardedUpsert and GuardedPut make it
// one call). Stop writing when Done is closed.
type Lease struct {
	c      *Client
	name   string
	token  string
	fence  uint64
	waited time.Duration
	// auto: the broker chooses the TTL at each renewal (WithTTLAuto).
	auto bool
	// marginSet: WithMargin fixed the margin; else it is a tenth of the
	// TTL, which an auto lease's renewals change.
	marginSet bool

	mu       sync.Mutex
	ttl      time.Duration
	margin   time.Duration
	deadline time.Time // on the monotonic clock (time.Now)
	err      error     // nil while held
	done     chan struct{}
	timer    *time.Timer
}

func newLease(c *Client, name, token string, fence uint64, ttl, margin, waited time.Duration, deadline time.Time, auto, marginSet bool) *Lease {
	l := &Lease{c: c, name: name, token: token, fence: fence, ttl: ttl, margin: margin, waited: waited,
		deadline: deadline, done: make(chan struct{}), auto: auto, marginSet: marginSet}
	l.mu.Lock()
	// A timer at the local deadline closes Done on time whatever the
	// keeper is doing (reconnecting, waiting on a broker that is gone).
	l.timer = time.AfterFunc(time.Until(deadline), l.expire)
	l.mu.Unlock()
	return l
}

// Name is the lock name.
func (l *Lease) Name() string { return l.name }

// Fence is the fencing token: strictly greater than the fence of every
// earlier grant of this name (for an election: the leader's term). Compare
// fences; never subtract them (they are not dense).
func (l *Lease) Fence() uint64 { return l.fence }

// OwnerToken is the secret that proves ownership (32 hex characters). A
// password: do not log it.
func (l *Lease) OwnerToken() string { return l.token }

// TTL is the TTL the broker applied (which counts, not the one asked for).
// For a lease acquired WithTTLAuto, the one of its last renewal: the
// broker chooses it again at each heartbeat.
func (l *Lease) TTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// Margin is how long before the broker could expire the lease it counts as
// lost here: time for the application to stop writing.
func (l *Lease) Margin() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.margin
}

// Waited is how long the acquire waited for the lock (all its calls).
func (l *Lease) Waited() time.Duration { return l.waited }

// Deadline is the lease's local deadline: the send time of the request
// that last confirmed it (the grant, plus the time the broker said it
// waited; or the last renewal) + its TTL - Margin. Latency and clock skew
// can only make it early. Each confirmed renewal moves it forward. Done is
// closed when it passes without one.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Done is closed when the lease can no longer be relied on: the broker
// said it is lost, or its local deadline passed without a confirmed
// renewal (whatever the broker can or cannot say: a timer on the deadline
// closes it, even while the client reconnects), or it was released. Err
// says which.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err is nil while the lease is held; then a *LostError (errors.Is(err,
// ErrLost)) with the reason once it is lost, or ErrReleased after Release.
// It counts the local deadline itself, so it is never nil past it, even if
// a timer is late.
func (l *Lease) Err() error {
	l.mu.Lock()
	err, deadline := l.err, l.deadline
	l.mu.Unlock()
	if err != nil {
		return err
	}
	if !time.Now().Before(deadline) {
		l.expire()
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.err
	}
	return nil
}

// Context is a context derived from parent that is cancelled when Done is
// closed: pass it to the work done under the lease. Call cancel when the
// work is done.
func (l *Lease) Context(parent context.Context) (ctx context.Context, cancel context.CancelFunc) {
	ctx, cancel = context.WithCancel(parent)
	go func() {
		select {
		case <-l.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Release stops renewing the lease and releases it, waking the next
// waiter. It returns a *LostError (errors.Is(err, ErrLost)) if the lease
// was lost before: then it ran out while held, and writes made near its
// end may have raced with the next holder (which is what fences are for).
// Calling it again after a release does nothing.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if errors.Is(l.err, ErrReleased) {
		l.mu.Unlock()
		return nil
	}
	if l.err == nil && !time.Now().Before(l.deadline) {
		l.mu.Unlock()
		l.expire()
		l.mu.Lock()
	}
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return err
	}
	l.err = ErrReleased
	l.timer.Stop()
	close(l.done)
	l.mu.Unlock()
	l.c.keeper.forget(l)
	err := l.c.releaseToken(ctx, l.name, l.token)
	if lost := lostFrom(l.name, err); lost != nil {
		return lost
	}
	return err
}

// String shows the lease without its secret (the token's first 4
// characters only, as the broker logs it).
func (l *Lease) String() string {
	state := "held"
	if err := l.Err(); errors.Is(err, ErrReleased) {
		state = "released"
	} else if err != nil {
		var lost *LostError
		if errors.As(err, &lost) {
			state = "lost: " + lost.Reason.String()
		}
	}
	return fmt.Sprintf("Lease{name: %q, fence: %d, token: %s…, %s}", l.name, l.fence, l.token[:min(4, len(l.token))], state)
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// expire is the deadline timer: the lease is lost if its deadline passed
// (a renewal moved it otherwise: the timer is re-armed).
func (l *Lease) expire() {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	if left := time.Until(l.deadline); left > 0 {
		l.timer.Reset(left)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	if l.lose(LossDeadlinePassed, "") {
		// It may still exist on the broker: free it for the next holder.
		l.c.keeper.lost(l)
		l.c.releaseInBackground(l.name, l.token)
	}
}

// renewed records a renewal the broker confirmed for a heartbeat sent at
// sent, with the TTL it applied. A lease whose deadline passed stays lost:
// the application may have seen it lost and must not see it come back.
//
// With the same TTL the deadline only moves forward. A different TTL (an
// auto lease's, which the broker chooses at each renewal) replaced the
// lease's expiry in the store: the deadline follows it, earlier too, and
// the margin is a tenth of the new TTL unless WithMargin fixed it.
func (l *Lease) renewed(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil || !time.Now().Before(l.deadline) {
		return
	}
	if ttl > 0 && ttl != l.ttl {
		l.ttl = ttl
		if !l.marginSet {
			l.margin = ttl / 10
		} else if l.margin > ttl {
			l.margin = ttl
		}
		l.deadline = sent.Add(ttl - l.margin)
		l.timer.Reset(time.Until(l.deadline)) // past: expire runs at once
		return
	}
	if d := sent.Add(ttl - l.margin); d.After(l.deadline) {
		l.deadline = d
		l.timer.Reset(time.Until(d))
	}
}

// lose records the loss (the first reason wins) and closes Done; false if
// the lease had ended already.
func (l *Lease) lose(reason LossReason, message string) bool {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return false
	}
	l.err = &LostError{Name: l.name, Reason: reason, Message: message}
	l.timer.Stop()
	close(l.done)
	l.mu.Unlock()
	l.c.logger.Printf("%v", l.err)
	return true
}

// ended says whether the lease is lost or released (a passed deadline
// not yet noticed counts as not ended: the keeper looks at deadlines).
func (l *Lease) ended() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err != nil
}
