package leasehold_test

import (
	"context"
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
