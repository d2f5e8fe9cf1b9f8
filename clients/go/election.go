package leasehold

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// Campaign makes this process the leader of election with value (an
// address, an id: what Leader and Observe show), waiting as Acquire does
// (as long as ctx allows, or WithWait; WithTTL and WithMargin apply too).
// The Lease returned is the leadership: its Fence is the leader's term
// (attach it to what the leader writes, so that a deposed leader's late
// writes can be refused), Done closes when the leadership is lost, and
// Release resigns. An error matching ErrNotAcquired means another leader
// remains.
func (c *Client) Campaign(ctx context.Context, election, value string, opts ...AcquireOption) (*Lease, error) {
	o, err := c.acquireOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.ttlAuto {
		return nil, errors.New("leasehold: Campaign takes no WithTTLAuto (the broker's Campaign has no ttl_auto): give WithTTL")
	}
	send := func(ctx context.Context, s pb.LeaseholdServiceClient, wait time.Duration, keepPlace bool, place string, trailer *metadata.MD) (*pb.Lease, uint64, error) {
		req := &pb.CampaignRequest{Election: election, Value: value, TtlMs: millis(o.ttl),
			WaitTimeoutMs: millis(wait), KeepPlace: keepPlace, Place: place}
		r, err := s.Campaign(ctx, req, grpc.Trailer(trailer))
		return r.GetLease(), r.GetWaitedMs(), err
	}
	return c.chain(ctx, fmt.Sprintf("campaign in %q", election), o, send)
}

// Leader is an election's leadership: its leader's value and term (the
// leadership lease's fence), or Present false when it has none.
type Leader struct {
	Present   bool
	Value     string
	Term      uint64
	Remaining time.Duration
}

// Leader says who leads election now.
func (c *Client) Leader(ctx context.Context, election string) (Leader, error) {
	if err := c.check(); err != nil {
		return Leader{}, err
	}
	ctx, cancel := c.callCtx(ctx, 0)
	defer cancel()
	var r *pb.LeaderResponse
	err := c.brokers.call(ctx, fmt.Sprintf("leader of %q", election), func(ctx context.Context, s pb.LeaseholdServiceClient) (err error) {
		r, err = s.Leader(ctx, &pb.LeaderRequest{Election: election})
		return err
	})
	if err != nil {
		return Leader{}, err
	}
	return Leader{Present: r.Present, Value: r.Value, Term: r.Term, Remaining: ms(r.RemainingMs)}, nil
}

// Observer is an election's leadership as the broker pushes it: Next
// returns it as it is now, then each change, in order, as it happens.
type Observer struct {
	c      *Client
	op     string
	stream pb.LeaseholdService_ObserveClient
	cancel context.CancelFunc
	first  *pb.ObserveResponse
}

// Observe watches election: it returns once the broker's first answer (the
// leadership now) arrived, within the client's timeout, so that refusals
// (UNAUTHENTICATED, INVALID_ARGUMENT) come from here; after that the
// stream lasts until ctx ends or Close. When the broker ends it (a
// shutdown, a crash), Next returns the *Error (UNAVAILABLE): observe
// again, which goes to another replica if this one cannot be reached.
func (c *Client) Observe(ctx context.Context, election string) (*Observer, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("observe %q", election)
	attempts := len(c.brokers.stubs)
	for {
		i, stub := c.brokers.current()
		sctx, cancel := context.WithCancel(ctx)
		timer := time.AfterFunc(c.timeout, cancel)
		stream, err := stub.Observe(sctx, &pb.ObserveRequest{Election: election})
		var first *pb.ObserveResponse
		if err == nil {
			first, err = stream.Recv()
		}
		late := !timer.Stop()
		if err == nil {
			o := &Observer{c: c, op: op, stream: stream, cancel: cancel, first: first}
			c.mu.Lock()
			if c.closed {
				c.mu.Unlock()
				cancel()
				return nil, ErrClosed
			}
			c.watchers[o] = struct{}{}
			c.mu.Unlock()
			return o, nil
		}
		cancel()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("leasehold: %s: %w", op, ctx.Err())
		}
		if late {
			return nil, fmt.Errorf("leasehold: %s: no answer within %v: %w", op, c.timeout, context.DeadlineExceeded)
		}
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("leasehold: %s: the broker ended the stream without an answer", op)
		}
		err = toError(err, op, nil)
		if attempts > 1 && c.brokers.unreachable(i, err) {
			c.brokers.moveOn(i, "unreachable")
			attempts--
			continue
		}
		return nil, err
	}
}

// Next is the leadership now (first), then at each change. It blocks until
// one comes; after Close (or the end of Observe's context) it returns
// io.EOF.
func (o *Observer) Next() (Leader, error) {
	r := o.first
	o.first = nil
	if r == nil {
		var err error
		r, err = o.stream.Recv()
		if err != nil {
			if o.stream.Context().Err() != nil {
				return Leader{}, io.EOF
			}
			return Leader{}, toError(err, o.op, nil)
		}
	}
	return Leader{Present: r.Present, Value: r.Value, Term: r.Term, Remaining: ms(r.RemainingMs)}, nil
}

// Close ends the stream; Next then returns io.EOF.
func (o *Observer) Close() {
	o.cancel()
	o.c.mu.Lock()
	delete(o.c.watchers, o)
	o.c.mu.Unlock()
}
