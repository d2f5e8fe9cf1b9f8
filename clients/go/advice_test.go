package leasehold_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// linesLogger keeps the client's log lines.
type linesLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *linesLogger) Printf(format string, args ...interface{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *linesLogger) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

// renewals waits until l's deadline has moved n times (n heartbeats
// answered): the heartbeats are the events; polling the deadline is how
// the test sees them.
func renewals(t *testing.T, l *leasehold.Lease, n int, within time.Duration) {
	t.Helper()
	last, seen := l.Deadline(), 0
	end := time.Now().Add(within)
	for seen < n {
		if d := l.Deadline(); d.After(last) {
			last, seen = d, seen+1
		}
		if err := l.Err(); err != nil {
			t.Fatalf("lease lost after %d renewals: %v", seen, err)
		}
		if time.Now().After(end) {
			t.Fatalf("%d renewals of %d within %v", seen, n, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The broker warns exactly the stream whose TTL is under 10 times its
// heartbeat round trip p99: a short-TTL lease behind a proxy adding 50 ms
// each way is warned (once in the log, at each answer to the callback);
// a long-TTL lease on a direct connection to the same broker is not.
func TestTTLAdviceWarnsTheSlowStreamOnly(t *testing.T) {
	t.Parallel()
	ctx := bg(t)
	b := startBroker(t, "--ttl-min", "100ms")
	proxy := startProxy(t, b.addr, 50*time.Millisecond)

	slowLog := &linesLogger{}
	advised := make(chan leasehold.TTLAdvice, 64)
	slow := dial(t, proxy.addr, leasehold.WithLogger(slowLog), leasehold.WithTTLAdvice(func(a leasehold.TTLAdvice) {
		select {
		case advised <- a:
		default:
		}
	}))
	fastLog := &linesLogger{}
	fastAdvised := make(chan leasehold.TTLAdvice, 64)
	fast := dial(t, b.addr, leasehold.WithLogger(fastLog), leasehold.WithTTLAdvice(func(a leasehold.TTLAdvice) { fastAdvised <- a }))

	short, err := slow.Acquire(ctx, lockName(t)+"/slow", leasehold.WithTTL(600*time.Millisecond), leasehold.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	long, err := fast.Acquire(ctx, lockName(t)+"/fast", leasehold.WithTTL(3*time.Second), leasehold.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}

	// Three answers carrying advice (the broker needs three round trips
	// measured before the first).
	var a leasehold.TTLAdvice
	for i := 0; i < 3; i++ {
		select {
		case a = <-advised:
		case <-time.After(10 * time.Second):
			t.Fatalf("advice %d of 3 not within 10 s (the slow stream's heartbeats report their round trips?)", i+1)
		}
	}
	if a.RoundTripP99 < 100*time.Millisecond || a.ShortestTTL != 600*time.Millisecond || a.LeasesBelow != 1 ||
		a.SuggestedTTL < 10*a.RoundTripP99 || a.Message == "" {
		t.Fatalf("advice %+v: want a p99 of at least the proxy's 100 ms round trip, the 600 ms TTL, one lease below, a suggestion of 10 p99 or more", a)
	}
	if got, ok := slow.TTLAdvice(); !ok || got.ShortestTTL != 600*time.Millisecond {
		t.Fatalf("slow.TTLAdvice() = %+v, %v", got, ok)
	}
	if n := slowLog.count("TTL advice"); n != 1 {
		t.Fatalf("the advice logged %d times over 3 answers, want once per stream: %q", n, slowLog.lines)
	}
	if err := short.Err(); err != nil {
		t.Fatal(err)
	}

	// The fast stream: enough heartbeats answered for the broker to judge
	// it (3 round trips, and one more), and no advice.
	renewals(t, long, 4, 15*time.Second)
	if a, ok := fast.TTLAdvice(); ok {
		t.Fatalf("the fast stream was advised: %+v", a)
	}
	select {
	case a := <-fastAdvised:
		t.Fatalf("the fast stream's callback got %+v", a)
	default:
	}
	if n := fastLog.count("TTL advice"); n != 0 {
		t.Fatalf("the fast stream logged advice: %q", fastLog.lines)
	}
}

// WithTTLAuto: the broker chooses the TTL, at first its --ttl-auto-floor
// (nothing measured yet), then, at each heartbeat, 10 times the p99 of the
// stream's round trips: behind a proxy adding 50 ms each way, 1 s or more.
// The lease's TTL and deadline follow, and it stays held.
func TestTTLAuto(t *testing.T) {
	t.Parallel()
	ctx := bg(t)
	b := startBroker(t, "--ttl-min", "100ms", "--ttl-auto-floor", "500ms")
	proxy := startProxy(t, b.addr, 50*time.Millisecond)
	c := dial(t, proxy.addr)

	if _, err := c.Acquire(ctx, lockName(t), leasehold.WithTTLAuto(), leasehold.WithTTL(time.Second)); err == nil {
		t.Fatal("WithTTL and WithTTLAuto together: no error")
	}
	if _, err := c.Campaign(ctx, lockName(t), "v", leasehold.WithTTLAuto()); err == nil {
		t.Fatal("Campaign WithTTLAuto: no error")
	}
	l, err := c.Acquire(ctx, lockName(t), leasehold.WithTTLAuto(), leasehold.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL() != 500*time.Millisecond {
		t.Fatalf("granted TTL %v, want the floor, 500ms (no round trip measured yet)", l.TTL())
	}
	end := time.Now().Add(15 * time.Second)
	for l.TTL() < time.Second {
		if err := l.Err(); err != nil {
			t.Fatalf("lost at TTL %v: %v", l.TTL(), err)
		}
		if time.Now().After(end) {
			t.Fatalf("TTL still %v after 15 s: want 10 times the 100 ms round trip or more", l.TTL())
		}
		time.Sleep(10 * time.Millisecond) // polling the TTL each answer sets
	}
	for {
		ttl, margin, left := l.TTL(), l.Margin(), time.Until(l.Deadline())
		if l.TTL() != ttl {
			continue // a renewal changed it meanwhile: look again
		}
		if left <= 0 || left > ttl-margin || margin != ttl/10 {
			t.Fatalf("TTL %v, margin %v, deadline in %v", ttl, margin, left)
		}
		break
	}
	// Held over several of the new TTLs (and a long one held past its
	// first, short one).
	renewals(t, l, 4, 15*time.Second)
	d, err := c.Describe(ctx, l.Name())
	if err != nil || !d.Held || d.Fence != l.Fence() || d.TTL < time.Second {
		t.Fatalf("describe: %+v %v", d, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// An auto lease whose TTL shrinks at a renewal is beaten sooner: granted
// 10 times the round trips of the tenant's slow stream (2 s or more), it
// is renewed on its own fast stream for the floor (500 ms), and must be
// beaten every third of that from then on, not of the TTL it had.
func TestTTLAutoShrinking(t *testing.T) {
	t.Parallel()
	ctx := bg(t)
	b := startBroker(t, "--ttl-min", "100ms", "--ttl-auto-floor", "500ms")
	proxy := startProxy(t, b.addr, 100*time.Millisecond)
	advised := make(chan leasehold.TTLAdvice, 1)
	slow := dial(t, proxy.addr, leasehold.WithTTLAdvice(func(a leasehold.TTLAdvice) {
		select {
		case advised <- a:
		default:
		}
	}))
	if _, err := slow.Acquire(ctx, lockName(t)+"/slow", leasehold.WithTTL(time.Second), leasehold.WithWait(0)); err != nil {
		t.Fatal(err)
	}
	// Advice means three round trips measured: the tenant's p99 too.
	select {
	case <-advised:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow stream was not advised within 10 s")
	}
	fast := dial(t, b.addr)
	l, err := fast.Acquire(ctx, lockName(t)+"/fast", leasehold.WithTTLAuto(), leasehold.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL() < 2*time.Second {
		t.Fatalf("granted %v: want 10 times the slow stream's 200 ms round trips", l.TTL())
	}
	renewals(t, l, 6, 10*time.Second)
	if l.TTL() != 500*time.Millisecond {
		t.Fatalf("TTL %v after renewals on the fast stream, want the floor, 500ms", l.TTL())
	}
}
