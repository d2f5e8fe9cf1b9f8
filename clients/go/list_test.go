package leasehold_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

const listTTL = 10 * time.Second

// listScene: under prefix, two locks (a, b) and a semaphore with two of
// its three permits taken, a caller waiting in a's line; and a lock
// outside the prefix whose name starts like it.
type listScene struct {
	prefix, a, b, sem, outside string
	leaseA, leaseB             *leasehold.Lease
}

func newListScene(t *testing.T, c, other *leasehold.Client) (*listScene, <-chan *leasehold.Lease) {
	t.Helper()
	ctx, base := bg(t), lockName(t)
	s := &listScene{prefix: base + "/", a: base + "/a", b: base + "/b", sem: base + "/sem", outside: base + "-outside/c"}
	acquire := func(name string, opts ...leasehold.AcquireOption) *leasehold.Lease {
		t.Helper()
		l, err := c.Acquire(ctx, name, append([]leasehold.AcquireOption{leasehold.WithTTL(listTTL), leasehold.WithWait(0)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return l // released by the client's Close at the end of the test
	}
	s.leaseA = acquire(s.a, leasehold.WithHolder("holder-a"))
	s.leaseB = acquire(s.b, leasehold.WithHolder("holder-b"))
	acquire(s.sem, leasehold.WithLimit(3))
	acquire(s.sem, leasehold.WithLimit(3))
	acquire(s.outside)
	got := make(chan *leasehold.Lease, 1)
	go func() {
		// nil if it failed: the test says so where it reads it.
		l, _ := other.Acquire(ctx, s.a, leasehold.WithTTL(listTTL), leasehold.WithWait(30*time.Second), leasehold.WithHolder("waiter"))
		got <- l
	}()
	waitFor(t, func() bool { d, _ := c.Describe(ctx, s.a); return d.Waiters == 1 }, "the waiter in line")
	return s, got
}

// check: listed is exactly the scene's names under the prefix, each as it is.
func (s *listScene) check(t *testing.T, listed []leasehold.Listed) {
	t.Helper()
	byName := map[string]leasehold.Listed{}
	var names []string
	for _, l := range listed {
		byName[l.Name] = l
		names = append(names, l.Name)
	}
	sort.Strings(names)
	if want := []string{s.a, s.b, s.sem}; fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("listed %v, not %v", names, want)
	}
	for _, w := range []struct {
		lease   *leasehold.Lease
		holder  string
		waiters uint64
	}{{s.leaseA, "holder-a", 1}, {s.leaseB, "holder-b", 0}} {
		l := byName[w.lease.Name()]
		if !l.Held || l.Holder != w.holder || l.Fence != w.lease.Fence() || l.Waiters != w.waiters || l.PermitsHeld != 0 ||
			l.Tenant != "@root" || l.Remaining <= 0 || l.Remaining > listTTL || l.TTL != listTTL ||
			time.Since(l.GrantedAt).Abs() > time.Minute || l.LockDelayRemaining != 0 {
			t.Fatalf("%s: %+v (fence %d)", w.lease.Name(), l, w.lease.Fence())
		}
	}
	if sem := byName[s.sem]; sem.Held || sem.PermitsHeld != 2 || sem.Waiters != 0 {
		t.Fatalf("the semaphore: %+v", sem)
	}
}

func collect(t *testing.T, c *leasehold.Client, opts leasehold.ListOptions) []leasehold.Listed {
	t.Helper()
	var all []leasehold.Listed
	if err := c.List(bg(t), opts, func(l leasehold.Listed) error { all = append(all, l); return nil }); err != nil {
		t.Fatal(err)
	}
	return all
}

func TestList(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c, other := dial(t, b.addr), dial(t, b.addr)
	ctx := bg(t)
	s, got := newListScene(t, c, other)

	// One page of the default size holds them all (memory store: in name
	// order, and the walk is done).
	page, err := c.ListPage(ctx, leasehold.ListOptions{Prefix: s.prefix})
	if err != nil {
		t.Fatal(err)
	}
	if page.NextPageToken != "" || len(page.Locks) != 3 || page.Locks[0].Name != s.a || page.Locks[1].Name != s.b || page.Locks[2].Name != s.sem {
		t.Fatalf("%+v", page)
	}
	s.check(t, page.Locks)
	s.check(t, collect(t, c, leasehold.ListOptions{Prefix: s.prefix}))

	// Pages of one name: the tokens lead over all of them.
	var entries []leasehold.Listed
	pages := 0
	for opts := (leasehold.ListOptions{Prefix: s.prefix, PageSize: 1}); ; {
		page, err := c.ListPage(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page.Locks) > 1 {
			t.Fatalf("a page of 1 with %d entries", len(page.Locks))
		}
		entries = append(entries, page.Locks...)
		if page.NextPageToken == "" {
			break
		}
		opts.PageToken = page.NextPageToken
	}
	if pages < 3 {
		t.Fatalf("%d pages", pages)
	}
	s.check(t, entries)
	s.check(t, collect(t, c, leasehold.ListOptions{Prefix: s.prefix, PageSize: 1}))

	// The name outside the prefix is under its own.
	if out := collect(t, c, leasehold.ListOptions{Prefix: strings.TrimSuffix(s.outside, "c")}); len(out) != 1 || out[0].Name != s.outside {
		t.Fatalf("%+v", out)
	}

	// f's error stops the walk and comes back as is.
	enough := errors.New("enough")
	calls := 0
	err = c.List(ctx, leasehold.ListOptions{Prefix: s.prefix, PageSize: 1}, func(leasehold.Listed) error { calls++; return enough })
	if err != enough || calls != 1 {
		t.Fatalf("%v after %d calls", err, calls)
	}

	if err := s.leaseA.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l := <-got; l == nil || l.Fence() <= s.leaseA.Fence() {
		t.Fatalf("the waiter's lease: %v", l)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestListRefusesAPageAboveTheMaximum(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c := dial(t, b.addr)
	ctx := bg(t)
	refused := func(err error) {
		t.Helper()
		var e *leasehold.Error
		if !errors.As(err, &e) || e.Code != codes.InvalidArgument || e.Reason != "BAD_ARGUMENT" ||
			e.Metadata["argument"] != "page_size" || e.Metadata["max_page_size"] != "1000" {
			t.Fatalf("%#v", err)
		}
		if !strings.Contains(err.Error(), "ListOptions.PageSize: ") {
			t.Fatalf("message: %v", err)
		}
	}
	_, err := c.ListPage(ctx, leasehold.ListOptions{PageSize: 5000})
	refused(err)
	refused(c.List(ctx, leasehold.ListOptions{PageSize: 5000}, func(leasehold.Listed) error { t.Fatal("called"); return nil }))

	_, err = c.ListPage(ctx, leasehold.ListOptions{Prefix: "bad name with spaces"})
	var e *leasehold.Error
	if !errors.As(err, &e) || e.Reason != "BAD_ARGUMENT" || e.Metadata["argument"] != "prefix" || !strings.Contains(err.Error(), "ListOptions.Prefix: ") {
		t.Fatalf("%v", err)
	}
}

// With an --auth-file: an administrator lists every tenant's names (the
// same name in two tenants, told apart); a use-only credential only its own.
func TestListEveryTenantAsAnAdmin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens := map[string]string{"payments": "payments-token-0123456789abcdef", "search": "search-token-0123456789abcdef", "ops": "ops-token-0123456789abcdef"}
	var file strings.Builder
	for _, tenant := range []string{"payments", "search", "ops"} {
		sum := sha256.Sum256([]byte(tokens[tenant]))
		perms := "use"
		if tenant == "ops" {
			perms = "use,admin"
		}
		fmt.Fprintf(&file, "%s %s token:sha256:%s\n", tenant, perms, hex.EncodeToString(sum[:]))
	}
	auth := filepath.Join(dir, "auth")
	if err := os.WriteFile(auth, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, "--auth-file", auth)
	payments := dial(t, b.addr, leasehold.WithToken(tokens["payments"]))
	search := dial(t, b.addr, leasehold.WithToken(tokens["search"]))
	ops := dial(t, b.addr, leasehold.WithToken(tokens["ops"]))
	ctx, prefix := bg(t), lockName(t)+"/"
	name := prefix + "ledger"
	mine, err := payments.Acquire(ctx, name, leasehold.WithTTL(listTTL), leasehold.WithWait(0), leasehold.WithHolder("payments-job"))
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := search.Acquire(ctx, name, leasehold.WithTTL(listTTL), leasehold.WithWait(0), leasehold.WithHolder("search-job"))
	if err != nil {
		t.Fatal(err)
	}

	for _, size := range []uint32{0, 1} {
		every := collect(t, ops, leasehold.ListOptions{Prefix: prefix, Tenant: "*", PageSize: size})
		sort.Slice(every, func(i, j int) bool { return every[i].Tenant < every[j].Tenant })
		if len(every) != 2 ||
			every[0].Tenant != "payments" || every[0].Name != name || every[0].Holder != "payments-job" || every[0].Fence != mine.Fence() ||
			every[1].Tenant != "search" || every[1].Name != name || every[1].Holder != "search-job" || every[1].Fence != theirs.Fence() {
			t.Fatalf("page size %d: %+v", size, every)
		}
	}
	if one := collect(t, ops, leasehold.ListOptions{Prefix: prefix, Tenant: "payments"}); len(one) != 1 || one[0].Holder != "payments-job" {
		t.Fatalf("payments', by an admin: %+v", one)
	}
	if own := collect(t, search, leasehold.ListOptions{Prefix: prefix}); len(own) != 1 || own[0].Tenant != "search" || own[0].Holder != "search-job" {
		t.Fatalf("search's own: %+v", own)
	}
	if none := collect(t, ops, leasehold.ListOptions{Prefix: prefix}); len(none) != 0 {
		t.Fatalf("the admin's own namespace: %+v", none)
	}
	for _, tenant := range []string{"*", "payments"} {
		_, err := search.ListPage(ctx, leasehold.ListOptions{Prefix: prefix, Tenant: tenant})
		var e *leasehold.Error
		if !errors.As(err, &e) || e.Code != codes.PermissionDenied {
			t.Fatalf("search listing %q: %v", tenant, err)
		}
	}
	if err := mine.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := theirs.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// On Redis (SCAN's order, a name perhaps on two pages): every walk covers
// every name, kept once per (tenant, name).
func TestListOnRedis(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "--store", startRedis(t))
	c := dial(t, b.addr)
	ctx, base := bg(t), lockName(t)
	fences := map[string]uint64{}
	for i := 0; i < 12; i++ {
		name := fmt.Sprintf("%s/%02d", base, i)
		l, err := c.Acquire(ctx, name, leasehold.WithTTL(listTTL), leasehold.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		fences[name] = l.Fence()
	}
	for _, size := range []uint32{1, 5, 0} {
		seen := map[[2]string]leasehold.Listed{}
		for _, l := range collect(t, c, leasehold.ListOptions{Prefix: base + "/", PageSize: size}) {
			seen[[2]string{l.Tenant, l.Name}] = l
		}
		if len(seen) != len(fences) {
			t.Fatalf("page size %d: %d names, not %d", size, len(seen), len(fences))
		}
		for name, fence := range fences {
			if l, ok := seen[[2]string{"@root", name}]; !ok || l.Fence != fence {
				t.Fatalf("page size %d: %s: %+v", size, name, l)
			}
		}
	}
}
