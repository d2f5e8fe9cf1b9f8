package leasehold_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

type invoiceStore struct{}

func (invoiceStore) Write(invoice string, fence uint64) error { return nil }

// The invoice job: one machine at a time runs it; every write carries the
// fence, and the job stops when the lease is lost.
func Example() {
	ctx := context.Background()
	store, invoices := invoiceStore{}, []string{"INV-1", "INV-2"}
	client, err := leasehold.Dial("127.0.0.1:7420")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	lease, err := client.Acquire(ctx, "invoices/nightly", leasehold.WithTTL(30*time.Second), leasehold.WithWait(0))
	if errors.Is(err, leasehold.ErrNotAcquired) {
		return // another machine runs it tonight
	} else if err != nil {
		log.Fatal(err)
	}
	for _, invoice := range invoices {
		if err := lease.Err(); err != nil { // non-nil once lease.Done() is closed
			log.Fatal(err) // lost: no more writes
		}
		if err := store.Write(invoice, lease.Fence()); err != nil {
			log.Fatal(err)
		}
	}
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
}

// Who holds a lock, from the broker's refusal.
func ExampleError() {
	ctx := context.Background()
	client, _ := leasehold.Dial("127.0.0.1:7420")
	defer client.Close()
	_, err := client.Acquire(ctx, "invoices/nightly", leasehold.WithWait(0))
	var refusal *leasehold.Error
	if errors.As(err, &refusal) && refusal.Reason == "LOCK_HELD" {
		fmt.Println("held by", refusal.Metadata["holder"], "; retry in", refusal.RetryDelay)
	}
}

// Leader election: campaign, lead while the leadership lasts, resign.
func ExampleClient_Campaign() {
	ctx := context.Background()
	client, _ := leasehold.Dial("10.0.0.1:7420,10.0.0.2:7420")
	defer client.Close()
	leadership, err := client.Campaign(ctx, "scheduler", "10.0.0.7:8080", leasehold.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	work, cancel := leadership.Context(ctx)
	defer cancel()
	<-work.Done() // lead until the leadership is lost (or ctx ends)
	fmt.Println("no longer the leader (term", leadership.Fence(), "):", leadership.Err())
	_ = leadership.Release(ctx)
}

// Every lock under a prefix, page by page, each name once (on a Redis
// store a name may come on two pages).
func ExampleClient_List() {
	ctx := context.Background()
	client, _ := leasehold.Dial("127.0.0.1:7420")
	defer client.Close()
	seen := map[[2]string]bool{}
	err := client.List(ctx, leasehold.ListOptions{Prefix: "invoices/", PageSize: 500}, func(l leasehold.Listed) error {
		if key := [2]string{l.Tenant, l.Name}; !seen[key] {
			seen[key] = true
			fmt.Println(l.Name, l.Holder, l.Fence, l.Waiters)
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

type mailer struct{}

func (mailer) Send(to, body string) error { return nil }

// A resource that can store no fence (a mail sent, a payment API called):
// ask the broker, just before the side effect, whether the lease is still
// the current one. It narrows the window to the check's round trip, not
// to nothing: a store that keeps the fence (GuardedUpdate, GuardedPut)
// closes it.
func ExampleClient_CheckFence() {
	ctx := context.Background()
	client, _ := leasehold.Dial("127.0.0.1:7420")
	defer client.Close()
	lease, err := client.Acquire(ctx, "mail/digest", leasehold.WithWait(0))
	if err != nil {
		log.Fatal(err)
	}
	// ... the digest is built: maybe long enough for a GC pause past the TTL ...
	current, currentFence, err := client.CheckFence(ctx, lease.Name(), lease.Fence())
	if err != nil {
		log.Fatal(err)
	}
	if !current {
		fmt.Println("another holder (fence", currentFence, ") took over: not sending")
		return
	}
	_ = mailer{}.Send("team@example.com", "digest")
	_ = lease.Release(ctx)
}

// A balance written under a lease: the table keeps the fence of the last
// write, and refuses a write with a lower one.
func ExampleGuardedUpdate() {
	ctx := context.Background()
	var db *sql.DB // sql.Open("postgres", ...), after FenceMigration("accounts")
	var lease *leasehold.Lease
	err := leasehold.GuardedUpdate(ctx, db, leasehold.FencedRow{
		Table: "accounts",
		Key:   leasehold.Column{Name: "id", Value: "alice"},
		Set:   []leasehold.Column{{Name: "balance", Value: 120}},
		Fence: lease.Fence(),
	})
	switch {
	case errors.Is(err, leasehold.ErrStaleFence):
		log.Fatal("the lease was lost: a later holder wrote; stop") // err says which fences
	case errors.Is(err, leasehold.ErrRowNotFound):
		log.Fatal("no account alice")
	case err != nil:
		log.Fatal(err)
	}
}

// Advice on the TTLs: the client logs it once per stream; a callback gets
// each answer's.
func ExampleWithTTLAdvice() {
	client, _ := leasehold.Dial("127.0.0.1:7420", leasehold.WithTTLAdvice(func(a leasehold.TTLAdvice) {
		fmt.Printf("TTL %v is under 10x the heartbeat p99 %v: use %v\n", a.ShortestTTL, a.RoundTripP99, a.SuggestedTTL)
	}))
	defer client.Close()
	// Or let the broker choose: 10x the p99 it measures, at least its floor.
	lease, err := client.Acquire(context.Background(), "jobs/sync", leasehold.WithTTLAuto())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("TTL chosen:", lease.TTL())
}
