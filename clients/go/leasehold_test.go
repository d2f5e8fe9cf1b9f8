package leasehold_test

import (
	"context"
	"errors"
	"io"
	"log"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// quiet: the client's warnings go to the test's log.
type testLogger struct{ t *testing.T }

func (l testLogger) Printf(format string, args ...interface{}) { l.t.Logf(format, args...) }

func dial(t *testing.T, target string, opts ...leasehold.Option) *leasehold.Client {
	t.Helper()
	opts = append([]leasehold.Option{leasehold.WithLogger(log.New(io.Discard, "", 0))}, opts...)
	c, err := leasehold.Dial(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestAcquireDescribeRelease(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c := dial(t, b.addr)
	ctx, name := bg(t), lockName(t)
	lease, err := c.Acquire(ctx, name, leasehold.WithTTL(5*time.Second), leasehold.WithHolder("go-test"))
	if err != nil {
		t.Fatal(err)
	}
	if lease.Fence() == 0 || len(lease.OwnerToken()) != 32 || lease.TTL() != 5*time.Second || lease.Margin() != 500*time.Millisecond {
		t.Fatalf("lease %v: fence %d, ttl %v, margin %v", lease, lease.Fence(), lease.TTL(), lease.Margin())
	}
	if strings.Contains(lease.String(), lease.OwnerToken()) {
		t.Fatalf("String() shows the owner token: %s", lease)
	}
	if left := time.Until(lease.Deadline()); left <= 0 || left > 4500*time.Millisecond {
		t.Fatalf("deadline in %v, not within TTL - margin", left)
	}
	d, err := c.Describe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Held || d.Holder != "go-test" || d.Fence != lease.Fence() {
		t.Fatalf("describe: %+v", d)
	}
	current, fence, err := c.CheckFence(ctx, name, lease.Fence())
	if err != nil || !current || fence != lease.Fence() {
		t.Fatalf("check fence: %v %d %v", current, fence, err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	within(t, lease.Done(), time.Second, "Done after Release")
	if !errors.Is(lease.Err(), leasehold.ErrReleased) || errors.Is(lease.Err(), leasehold.ErrLost) {
		t.Fatalf("Err after release: %v", lease.Err())
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("a second release: %v", err)
	}
	if d, _ := c.Describe(ctx, name); d.Held {
		t.Fatalf("still held after release: %+v", d)
	}
}

func TestContention(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	a, other := dial(t, b.addr), dial(t, b.addr)
	ctx, name := bg(t), lockName(t)
	held, err := a.Acquire(ctx, name, leasehold.WithTTL(10*time.Second), leasehold.WithHolder("holder-a"))
	if err != nil {
		t.Fatal(err)
	}

	// Tried once: refused at once, saying who holds it.
	_, err = other.Acquire(ctx, name, leasehold.WithWait(0))
	if !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("try once: %v", err)
	}
	var e *leasehold.Error
	if !errors.As(err, &e) || e.Code != codes.Aborted || status.Code(err) != codes.Aborted {
		t.Fatalf("not an ABORTED *Error: %#v", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "rpc error") || strings.Count(msg, "leasehold:") != 1 || !strings.Contains(msg, name) {
		t.Fatalf("message %q: transport prefix, doubled text, or no lock name", msg)
	}
	if e.Reason != "" { // a broker with structured refusals
		if e.Reason != "LOCK_HELD" || e.Metadata["holder"] != "holder-a" || e.RetryDelay <= 0 {
			t.Fatalf("refusal: %q %v %v", e.Reason, e.Metadata, e.RetryDelay)
		}
	}

	// A wait bounded by the context's deadline: the broker's refusal, in time.
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	began := time.Now()
	_, err = other.Acquire(short, name)
	cancel()
	if !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("wait bounded by the context: %v", err)
	}
	if waited := time.Since(began); waited < 2*time.Second || waited > 3*time.Second+500*time.Millisecond {
		t.Fatalf("waited %v for a context of 3 s", waited)
	}

	// A cancelled wait returns the context's error.
	cctx, cancelWait := context.WithCancel(ctx)
	errs := make(chan error, 1)
	go func() { _, err := other.Acquire(cctx, name); errs <- err }()
	waitFor(t, func() bool { d, _ := a.Describe(ctx, name); return d.Waiters == 1 }, "the waiter in line")
	cancelWait()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	waitFor(t, func() bool { d, _ := a.Describe(ctx, name); return d.Waiters == 0 }, "the cancelled waiter gone")

	// A waiter gets it when the holder releases, with a higher fence.
	got := make(chan *leasehold.Lease, 1)
	go func() {
		l, err := other.Acquire(ctx, name, leasehold.WithWait(20*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, func() bool { d, _ := a.Describe(ctx, name); return d.Waiters == 1 }, "the waiter in line")
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-got
	if next == nil {
		t.FailNow()
	}
	if next.Fence() <= held.Fence() {
		t.Fatalf("fence %d after %d", next.Fence(), held.Fence())
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls a state only the broker knows (how many wait in line).
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRenewalOverSeveralTTLs(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c := dial(t, b.addr)
	ctx, name := bg(t), lockName(t)
	// Two leases of different TTLs on the one stream.
	short, err := c.Acquire(ctx, name, leasehold.WithTTL(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	long, err := c.Acquire(ctx, name+"-long", leasehold.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	first := short.Deadline()
	// Six TTLs of the short lease: it lives only if renewed.
	select {
	case <-short.Done():
		t.Fatalf("lost: %v", short.Err())
	case <-long.Done():
		t.Fatalf("lost: %v", long.Err())
	case <-time.After(3 * time.Second):
	}
	if short.Err() != nil || !short.Deadline().After(first.Add(2*time.Second)) {
		t.Fatalf("not renewed: err %v, deadline moved by %v", short.Err(), short.Deadline().Sub(first))
	}
	d, err := c.Describe(ctx, name)
	if err != nil || !d.Held || d.Fence != short.Fence() {
		t.Fatalf("describe: %+v %v", d, err)
	}
	if err := short.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := long.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestBrokerKilledFiresDoneBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c := dial(t, b.addr)
	ctx, name := bg(t), lockName(t)
	sent := time.Now()
	lease, err := c.Acquire(ctx, name, leasehold.WithTTL(2*time.Second), leasehold.WithMargin(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if !lease.Deadline().Before(sent.Add(2 * time.Second)) {
		t.Fatalf("deadline %v after send + TTL", lease.Deadline().Sub(sent))
	}
	b.kill()
	killed := time.Now()
	within(t, lease.Done(), 5*time.Second, "Done after the broker died")
	fired := time.Now()
	deadline := lease.Deadline() // the last confirmed renewal's
	// No renewal after the kill can have been confirmed but one answered
	// before it: the deadline is at most a TTL past the kill.
	if deadline.After(killed.Add(2 * time.Second)) {
		t.Fatalf("deadline %v after the kill", deadline.Sub(killed))
	}
	// Done fired at the deadline (a timer's latency late at most: inside
	// the margin), so before the broker could have expired the lease.
	if late := fired.Sub(deadline); late >= lease.Margin() {
		t.Fatalf("Done fired %v after the deadline, past the margin", late)
	}
	var lost *leasehold.LostError
	if !errors.As(lease.Err(), &lost) || lost.Reason != leasehold.LossDeadlinePassed || !errors.Is(lease.Err(), leasehold.ErrLost) {
		t.Fatalf("Err: %v", lease.Err())
	}
	if lost.Reason.String() != "DEADLINE_PASSED" {
		t.Fatalf("reason %s", lost.Reason)
	}
	if err := lease.Release(ctx); !errors.Is(err, leasehold.ErrLost) {
		t.Fatalf("release of a lost lease: %v", err)
	}
}

func TestFailoverToASecondBroker(t *testing.T) {
	t.Parallel()
	store := startRedis(t)
	b1 := startBroker(t, "--store", store)
	b2 := startBroker(t, "--store", store)
	c := dial(t, nobody(t)+","+b1.addr+", "+b2.addr)
	observer := dial(t, b2.addr)
	ctx, name := bg(t), lockName(t)
	// Past an address where nothing listens.
	lease, err := c.Acquire(ctx, name, leasehold.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if c.Target() != b1.addr {
		t.Fatalf("target %s, not %s", c.Target(), b1.addr)
	}
	b1.kill()
	// Kept alive through b2 over several TTLs.
	select {
	case <-lease.Done():
		t.Fatalf("lost: %v", lease.Err())
	case <-time.After(4 * time.Second):
	}
	if c.Target() != b2.addr {
		t.Fatalf("target %s after b1 died, not %s", c.Target(), b2.addr)
	}
	d, err := observer.Describe(ctx, name)
	if err != nil || !d.Held || d.Fence != lease.Fence() {
		t.Fatalf("describe on b2: %+v %v", d, err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if d, _ := observer.Describe(ctx, name); d.Held {
		t.Fatal("held after release")
	}
}

func TestRevoke(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "--enable-revoke")
	c, operator := dial(t, b.addr), dial(t, b.addr)
	ctx, name := bg(t), lockName(t)
	lease, err := c.Acquire(ctx, name, leasehold.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	fence, err := operator.Revoke(ctx, name)
	if err != nil || fence != lease.Fence() {
		t.Fatalf("revoke: %d %v", fence, err)
	}
	// Heard at the next heartbeat (a third of the TTL), well before the deadline.
	within(t, lease.Done(), 2*time.Second, "Done after the revoke")
	var lost *leasehold.LostError
	if !errors.As(lease.Err(), &lost) || lost.Reason != leasehold.LossRevoked {
		t.Fatalf("Err: %v", lease.Err())
	}
	if lost.Reason.String() != "REVOKED" {
		t.Fatalf("reason %s", lost.Reason)
	}
	if err := lease.Release(ctx); !errors.Is(err, leasehold.ErrLost) {
		t.Fatalf("release after revoke: %v", err)
	}
	// Repeated (a retry whose first try did the work): the same fence.
	if again, err := operator.Revoke(ctx, name); err != nil || again != fence {
		t.Fatalf("revoke again: %d %v", again, err)
	}
	// A revoke of a name never held is refused NOT_FOUND, which is no lost lease.
	_, err = operator.Revoke(ctx, name+"-free")
	if status.Code(err) != codes.NotFound || errors.Is(err, leasehold.ErrLost) {
		t.Fatalf("revoke of a free name: %v", err)
	}
}

func TestElection(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c, other := dial(t, b.addr), dial(t, b.addr)
	ctx, election := bg(t), lockName(t)
	obs, err := other.Observe(ctx, election)
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	if l, err := obs.Next(); err != nil || l.Present {
		t.Fatalf("first observation: %+v %v", l, err)
	}
	leader, err := c.Campaign(ctx, election, "node-a", leasehold.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := obs.Next(); err != nil || !l.Present || l.Value != "node-a" || l.Term != leader.Fence() {
		t.Fatalf("observed: %+v %v", l, err)
	}
	if _, err := other.Campaign(ctx, election, "node-b", leasehold.WithWait(0)); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("second candidate: %v", err)
	}
	if l, err := other.Leader(ctx, election); err != nil || l.Value != "node-a" {
		t.Fatalf("leader: %+v %v", l, err)
	}
	if err := leader.Release(ctx); err != nil { // resigns
		t.Fatal(err)
	}
	if l, err := obs.Next(); err != nil || l.Present {
		t.Fatalf("after resigning: %+v %v", l, err)
	}
	obs.Close()
	if _, err := obs.Next(); err != io.EOF {
		t.Fatalf("after Close: %v", err)
	}
}

func TestRefusalsInGoWords(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c := dial(t, nobody(t)+","+b.addr)
	ctx, name := bg(t), lockName(t)
	_, err := c.Acquire(ctx, name, leasehold.WithTTL(time.Millisecond))
	var e *leasehold.Error
	if !errors.As(err, &e) || e.Code != codes.InvalidArgument || errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("a TTL below the bounds: %v", err)
	}
	if strings.Contains(err.Error(), "rpc error") {
		t.Fatalf("transport prefix: %q", err)
	}
	if e.Reason != "" && !strings.Contains(err.Error(), "WithTTL") {
		t.Fatalf("not in Go's words: %q", err)
	}
	// A refusal moves nobody to another broker.
	if c.Target() != b.addr {
		t.Fatalf("target %s", c.Target())
	}
	c.Close()
	if _, err := c.Acquire(ctx, name); !errors.Is(err, leasehold.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestCloseReleasesTheLeases(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c, other := dial(t, b.addr), dial(t, b.addr)
	ctx, name := bg(t), lockName(t)
	lease, err := c.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	within(t, lease.Done(), time.Second, "Done after Close")
	if d, _ := other.Describe(ctx, name); d.Held {
		t.Fatal("held after Close")
	}
}
