// Package leasehold is the Go client of Leasehold, a lock broker with
// fencing tokens (proto/leasehold/v1/leasehold.proto documents the API
// field by field).
//
//	import leasehold "github.com/leasehold/leasehold/clients/go"
//
// A job that must run on one machine at a time, passing the fence to every
// write and stopping when the lease is lost:
//
//	client, err := leasehold.Dial("127.0.0.1:7420")
//	if err != nil {
//		return err
//	}
//	defer client.Close()
//	lease, err := client.Acquire(ctx, "invoices/nightly", leasehold.WithTTL(30*time.Second), leasehold.WithWait(0))
//	if err != nil {
//		return err // errors.Is(err, leasehold.ErrNotAcquired): another machine runs it
//	}
//	for _, invoice := range invoices {
//		if err := lease.Err(); err != nil { // non-nil once lease.Done() is closed
//			return err // lost: stop before the next write
//		}
//		if err := store.Write(invoice, lease.Fence()); err != nil { // the store refuses lower fences
//			return err
//		}
//	}
//	return lease.Release(ctx)
//
// # Acquiring
//
// Acquire waits for the lock while it is held, as long as its context
// allows (or WithWait: WithWait(0) tries once). Waiters are served in
// arrival order across every broker replica. A wait longer than the
// broker's --max-wait (5 minutes by default) is a chain of calls, each
// waiting in the place in line the one before kept (keep_place), so that
// nobody who came later overtakes it; the broker's refusal of a longer
// wait says its maximum (max_wait_ms), which the client then uses.
//
// # The lease's deadline, Done and Err
//
// The client computes each lease's local deadline as the time the request
// that confirmed it was sent (plus the time the broker says an Acquire
// waited) + the TTL the broker applied - a margin (WithMargin; a tenth of
// the TTL by default). Latency and clock skew can only make it early. One
// KeepAlive stream per Client renews all its leases every third of the
// shortest TTL, and each confirmed renewal moves the deadline forward.
//
// Lease.Done is closed as soon as the broker says the lease is lost, or
// when its deadline passes without a confirmed renewal (a timer on the
// deadline closes it, even while the client reconnects to a broker that is
// gone), or after Release. Lease.Err says why: a *LostError matching
// ErrLost, with a LossReason (LossExpired, LossNotOwner, LossStoreLost,
// LossRevoked from the broker, LossDeadlinePassed from the client's own
// deadline; String gives the proto's name without its prefix, EXPIRED for
// LOSS_REASON_EXPIRED, as every Leasehold client spells it, and
// DEADLINE_PASSED), or ErrReleased.
//
// # Fencing writes
//
// A lease cannot stop a holder paused past its TTL (a GC pause) from
// writing after its successor did; the storage can, by refusing a write
// whose fence is lower than one it accepted. GuardedUpdate and
// GuardedUpsert do it for a SQL table with a fence column
// (FenceMigration), in one statement; GuardedPut for an object store
// (an ObjectStore adapter of your SDK), with a conditional write keyed by
// the ETag; both return an error matching ErrStaleFence when refused.
// CheckFence asks the broker, for resources that can store nothing.
//
// # TTL advice
//
// Each heartbeat reports the round trip of the one before; while a TTL is
// under 10 times the p99 of its stream's round trips, the broker says so.
// The client logs it once per stream, passes it to WithTTLAdvice's
// callback, and keeps it for Client.TTLAdvice. WithTTLAuto lets the broker
// choose the TTL (10 times the p99, at least its floor), renewal after
// renewal.
//
// # Several brokers, TLS and tokens
//
// Dial takes several replicas' addresses separated by commas: calls and
// the KeepAlive stream go to one and move on to the next when it cannot be
// reached, and the leases resume there by owner token (the replicas share
// one store). WithTLS or WithTLSFiles (or an https:// target) connect over
// TLS, with a client certificate for mutual TLS; WithToken sends a bearer
// token for a broker with an --auth-file.
//
// # Errors
//
// A failed call returns an *Error (errors.As) with the gRPC Code, and the
// broker's structured refusal: Reason (LOCK_HELD, LOCK_DELAY, LINE_AHEAD,
// LEASE_NOT_HELD, LEASE_REVOKED, NOT_OWNER, BAD_ARGUMENT, LIMIT_REACHED,
// UNAVAILABLE...), Metadata and RetryDelay. An ABORTED *Error matches
// ErrNotAcquired; a release of a lease that was gone returns a *LostError,
// matching ErrLost. An *Error works with status.Code and status.FromError.
//
// # Elections
//
// Campaign becomes the leader of an election (a lease whose fence is the
// leader's term; Release resigns), Leader says who leads, and Observe
// streams the leadership as it changes.
//
// # Listing
//
// ListPage returns one page of the names under a prefix that have
// something on them (a lease, permits, waiters, a lock-delay), as Listed
// entries, and the token of the next page; List walks every page, calling
// a function with each entry (on a Redis store a name may come twice: keep
// one per Tenant and Name when that matters). An administrator lists
// another tenant's names, or every tenant's with Tenant "*".
package leasehold
