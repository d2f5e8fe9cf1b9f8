package leasehold

import (
	"context"
	"fmt"
	"time"

	pb "github.com/leasehold/leasehold/clients/go/leaseholdv1"
)

// Listed is a name a listing found something on (a lease, permits,
// callers waiting, a lock-delay): its state as Describe tells it, with the
// tenant it belongs to. Never an owner token.
type Listed struct {
	// Tenant is the tenant whose name it is ("@root" for the root
	// namespace).
	Tenant string
	// Name is the lock name, as its holders name it (without the tenant).
	Name string
	// Held: a lock lease holds it (false for a semaphore, whose permits
	// have no single holder).
	Held bool
	// Holder is the lease's holder label (an election's leader's value).
	Holder string
	// Fence is the lease's fence (an election's term).
	Fence uint64
	// Remaining is the time left before the lease expires unless renewed.
	Remaining time.Duration
	// TTL is the TTL the lease was granted or last renewed with.
	TTL time.Duration
	// GrantedAt is when the lease was granted, by the store's clock (the
	// zero Time when not held).
	GrantedAt time.Time
	// Waiters are the callers queued for the name, on every replica.
	Waiters uint64
	// PermitsHeld: a semaphore's permits held now (0 for a lock).
	PermitsHeld uint64
	// LockDelayRemaining: when not held, what is left of the lock-delay of
	// the lease that ended involuntarily.
	LockDelayRemaining time.Duration
}

// ListPage is one page of a listing (Client.ListPage).
type ListPage struct {
	// Locks are the names of the page with something on them; possibly
	// none, even when NextPageToken says there is more.
	Locks []Listed
	// NextPageToken is empty when the walk is done; otherwise pass it as
	// ListOptions.PageToken for the next page.
	NextPageToken string
}

// ListOptions says what to list (Client.ListPage, Client.List).
type ListOptions struct {
	// Prefix: only names that start with it ("": every name).
	Prefix string
	// Tenant: "" for the caller's own names; another tenant's ("@root" for
	// the root namespace) or "*" for every tenant's needs the admin
	// permission (PERMISSION_DENIED otherwise).
	Tenant string
	// PageSize is the most names the broker looks at in one call: 0 for
	// its default, 100; at most 1000 (past it the broker refuses with
	// INVALID_ARGUMENT, Reason BAD_ARGUMENT, Metadata["argument"]
	// "page_size").
	PageSize uint32
	// PageToken is where to go on: the NextPageToken of the previous page,
	// with the same Prefix and Tenant; "" for the first page. For List,
	// where the walk starts.
	PageToken string
}

// ListPage returns one page of the names that start with opts.Prefix and
// have something on them now: a lease, permits, callers waiting, a
// lock-delay (free names are left out). The broker looks at no more than
// opts.PageSize names per call, so a page may hold fewer entries, even
// none, while NextPageToken is not empty: pass it back as opts.PageToken,
// with the same Prefix and Tenant, until it is. List walks the pages.
//
// Names come in name order, except on a Redis store (its SCAN's order),
// where a name may also come on two pages. A refusal is an *Error (see
// ListOptions.PageSize for the page size's).
func (c *Client) ListPage(ctx context.Context, opts ListOptions) (ListPage, error) {
	if err := c.check(); err != nil {
		return ListPage{}, err
	}
	ctx, cancel := c.callCtx(ctx, 0)
	defer cancel()
	request := &pb.ListRequest{Prefix: opts.Prefix, Tenant: opts.Tenant, PageSize: opts.PageSize, PageToken: opts.PageToken}
	var r *pb.ListResponse
	err := c.brokers.call(ctx, fmt.Sprintf("list %q", opts.Prefix), func(ctx context.Context, s pb.LeaseholdServiceClient) (err error) {
		r, err = s.List(ctx, request)
		return err
	})
	if err != nil {
		return ListPage{}, err
	}
	page := ListPage{Locks: make([]Listed, 0, len(r.Locks)), NextPageToken: r.NextPageToken}
	for _, l := range r.Locks {
		page.Locks = append(page.Locks, listed(l))
	}
	return page, nil
}

func listed(l *pb.ListedLock) Listed {
	e := Listed{
		Tenant: l.Tenant, Name: l.Name, Held: l.Held, Holder: l.Holder, Fence: l.Fence,
		Remaining: ms(l.RemainingMs), TTL: ms(l.TtlMs), Waiters: l.Waiters, PermitsHeld: l.PermitsHeld,
		LockDelayRemaining: ms(l.LockDelayRemainingMs),
	}
	if l.GrantedAtUnixMs > 0 {
		e.GrantedAt = time.UnixMilli(int64(l.GrantedAtUnixMs))
	}
	return e
}

// List walks every page of the listing opts describes (from
// opts.PageToken; "" for the beginning), calling f with each entry as its
// page arrives: one page is in memory at a time, each a call of its own
// (bounded by the client's timeout), and ctx bounds the whole walk.
//
// f returning a non-nil error stops the walk, and List returns that
// error as is (a sentinel of the caller's says "enough"); a refused page
// returns its *Error. A name held for the whole walk is listed; one taken
// or freed during it may or may not be. On a Redis store a name may come
// twice, on two pages: List passes both on (removing them would mean
// remembering every name of the walk); when it matters, keep one entry per
// (Tenant, Name), as `leasehold list` does.
func (c *Client) List(ctx context.Context, opts ListOptions, f func(Listed) error) error {
	for {
		page, err := c.ListPage(ctx, opts)
		if err != nil {
			return err
		}
		for _, l := range page.Locks {
			if err := f(l); err != nil {
				return err
			}
		}
		if page.NextPageToken == "" {
			return nil
		}
		opts.PageToken = page.NextPageToken
	}
}
