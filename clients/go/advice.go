package leasehold

import (
	"errors"
	"sync"
	"time"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// A TTL shorter than ten heartbeat round trips is a lease one slow
// heartbeat away from being lost: the broker measures each stream's round
// trips (as this client reports them) and says so in its heartbeat
// answers. The client passes it on: once in its log per stream, to the
// WithTTLAdvice callback, and through Client.TTLAdvice.

// TTLAdvice is the broker's advice on the TTLs this client's heartbeats
// renew: some are under 10 times the p99 of the heartbeat round trips the
// broker measured on the client's KeepAlive stream.
type TTLAdvice struct {
	// RoundTripP99 is the 99th percentile of the stream's last 128
	// heartbeat round trips.
	RoundTripP99 time.Duration
	// ShortestTTL is the shortest TTL the heartbeat renewed.
	ShortestTTL time.Duration
	// SuggestedTTL is a TTL fit for the measured latency: 10 times the
	// p99, at least the broker's --ttl-auto-floor, within its bounds. What
	// WithTTLAuto gives.
	SuggestedTTL time.Duration
	// LeasesBelow is how many leases of the heartbeat have a TTL under 10
	// times the p99.
	LeasesBelow int
	// Message is the broker's sentence, for people and logs.
	Message string
}

func adviceFrom(a *pb.TtlAdvice) TTLAdvice {
	return TTLAdvice{
		RoundTripP99: time.Duration(a.RoundTripP99Us) * time.Microsecond,
		ShortestTTL:  ms(a.ShortestTtlMs), SuggestedTTL: ms(a.SuggestedTtlMs),
		LeasesBelow: int(a.LeasesBelow), Message: a.Message,
	}
}

// WithTTLAdvice calls fn with the broker's advice each time a heartbeat
// answer carries some (every heartbeat while a TTL stays too short), on a
// goroutine of its own: a slow fn delays only later calls, which then
// carry the latest advice, never the heartbeats. The client also logs the
// advice once per KeepAlive stream (WithLogger).
func WithTTLAdvice(fn func(TTLAdvice)) Option {
	return func(c *config) error {
		if fn == nil {
			return errors.New("leasehold: WithTTLAdvice: nil function")
		}
		c.onAdvice = fn
		return nil
	}
}

// TTLAdvice is the advice of the last heartbeat answer, and false when it
// carried none (every TTL it renewed is long enough for the round trips
// measured, or too few were measured yet, or no lease is held).
func (c *Client) TTLAdvice() (TTLAdvice, bool) {
	return c.keeper.advice.latest()
}

// adviceBox keeps the latest advice and hands it to the callback's
// goroutine (latest wins when the callback is slow).
type adviceBox struct {
	mu     sync.Mutex
	last   *TTLAdvice
	unsent bool
	fn     func(TTLAdvice)
	notify chan struct{}
}

func newAdviceBox(fn func(TTLAdvice), quit <-chan struct{}) *adviceBox {
	b := &adviceBox{fn: fn, notify: make(chan struct{}, 1)}
	if fn != nil {
		go b.deliver(quit)
	}
	return b
}

func (b *adviceBox) latest() (TTLAdvice, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last == nil {
		return TTLAdvice{}, false
	}
	return *b.last, true
}

// set records the advice of an answer (nil: none), and wakes the callback
// if there is advice.
func (b *adviceBox) set(a *TTLAdvice) {
	b.mu.Lock()
	b.last = a
	b.unsent = a != nil
	b.mu.Unlock()
	if a != nil && b.fn != nil {
		select {
		case b.notify <- struct{}{}:
		default:
		}
	}
}

func (b *adviceBox) deliver(quit <-chan struct{}) {
	for {
		select {
		case <-quit:
			return
		case <-b.notify:
		}
		b.mu.Lock()
		a, unsent := b.last, b.unsent
		b.unsent = false
		b.mu.Unlock()
		if unsent && a != nil {
			b.fn(*a)
		}
	}
}
