package leasehold_test

import (
	"database/sql"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// *sql.DB, *sql.Tx and *sql.Conn all run the guards.
var (
	_ leasehold.SQLExecutor = (*sql.DB)(nil)
	_ leasehold.SQLExecutor = (*sql.Tx)(nil)
	_ leasehold.SQLExecutor = (*sql.Conn)(nil)
)

func TestGuardedWriteStatements(t *testing.T) {
	t.Parallel()
	row := leasehold.FencedRow{Table: "app.Odd \"Table\"", Key: leasehold.Column{Name: "id", Value: "k"},
		Set: []leasehold.Column{{Name: "select", Value: 1}, {Name: "Amount", Value: 2}}, Fence: 7}
	stmt, args, err := row.UpdateSQL()
	if err != nil {
		t.Fatal(err)
	}
	want := `UPDATE "app"."Odd ""Table""" SET "select" = $3, "Amount" = $4, "fence" = $1 WHERE "id" = $2 AND "fence" <= $1`
	if stmt != want || len(args) != 4 || args[0] != int64(7) || args[1] != "k" || args[2] != 1 || args[3] != 2 {
		t.Fatalf("update:\n got %s %v\nwant %s", stmt, args, want)
	}
	stmt, _, err = row.UpsertSQL()
	if err != nil {
		t.Fatal(err)
	}
	want = `INSERT INTO "app"."Odd ""Table""" AS t ("id", "select", "Amount", "fence") VALUES ($2, $3, $4, $1) ON CONFLICT ("id") DO UPDATE SET "select" = EXCLUDED."select", "Amount" = EXCLUDED."Amount", "fence" = EXCLUDED."fence" WHERE t."fence" <= EXCLUDED."fence"`
	if stmt != want {
		t.Fatalf("upsert:\n got %s\nwant %s", stmt, want)
	}
	if m, err := leasehold.FenceMigration("accounts"); err != nil || m != `ALTER TABLE "accounts" ADD COLUMN IF NOT EXISTS fence bigint NOT NULL DEFAULT 0;` {
		t.Fatalf("migration: %q %v", m, err)
	}
	for what, bad := range map[string]leasehold.FencedRow{
		"a fence beyond bigint": {Table: "t", Key: leasehold.Column{Name: "id"}, Set: []leasehold.Column{{Name: "v"}}, Fence: math.MaxInt64 + 1},
		"no column":             {Table: "t", Key: leasehold.Column{Name: "id"}, Fence: 1},
		"an empty name":         {Table: "t", Key: leasehold.Column{Name: "id"}, Set: []leasehold.Column{{Name: ""}}, Fence: 1},
		"a NUL":                 {Table: "t\x00", Key: leasehold.Column{Name: "id"}, Set: []leasehold.Column{{Name: "v"}}, Fence: 1},
		"the fence set":         {Table: "t", Key: leasehold.Column{Name: "id"}, Set: []leasehold.Column{{Name: "fence"}}, Fence: 1},
		"three-part table":      {Table: "a.b.c", Key: leasehold.Column{Name: "id"}, Set: []leasehold.Column{{Name: "v"}}, Fence: 1},
	} {
		if _, _, err := bad.UpdateSQL(); err == nil {
			t.Errorf("%s: no error", what)
		}
	}
}

// The SQL guards on a real PostgreSQL, ending with the story they are
// for: a holder paused past its TTL writes after its successor did, and
// the table refuses it.
func TestFenceGuardsOnPostgreSQL(t *testing.T) {
	t.Parallel()
	db := startPostgres(t)
	ctx := bg(t)
	exec := func(stmt string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	exec(`CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL)`)
	exec(`INSERT INTO accounts VALUES ('alice', 100)`)
	migration, err := leasehold.FenceMigration("accounts")
	if err != nil {
		t.Fatal(err)
	}
	exec(migration)
	exec(migration) // IF NOT EXISTS: safe to run again
	balance := func(id string) (b, fence int64) {
		t.Helper()
		if err := db.QueryRowContext(ctx, `SELECT balance, fence FROM accounts WHERE id = $1`, id).Scan(&b, &fence); err != nil {
			t.Fatal(err)
		}
		return b, fence
	}
	write := func(id string, amount int64, fence uint64) leasehold.FencedRow {
		return leasehold.FencedRow{Table: "accounts", Key: leasehold.Column{Name: "id", Value: id},
			Set: []leasehold.Column{{Name: "balance", Value: amount}}, Fence: fence}
	}
	stale := func(err error, fence, stored uint64) {
		t.Helper()
		var e *leasehold.StaleFenceError
		if !errors.Is(err, leasehold.ErrStaleFence) || !errors.As(err, &e) || e.Fence != fence || e.Stored != stored {
			t.Fatalf("want a stale fence %d (stored %d), got %v", fence, stored, err)
		}
	}

	t.Run("EqualFencePassesLowerIsRefused", func(t *testing.T) {
		if b, f := balance("alice"); b != 100 || f != 0 {
			t.Fatalf("before: balance %d fence %d (the migration's default is 0)", b, f)
		}
		for _, amount := range []int64{110, 120} { // one lease, two writes
			if err := leasehold.GuardedUpdate(ctx, db, write("alice", amount, 5)); err != nil {
				t.Fatal(err)
			}
		}
		stale(leasehold.GuardedUpdate(ctx, db, write("alice", 999, 4)), 4, 5)
		if b, f := balance("alice"); b != 120 || f != 5 {
			t.Fatalf("after: balance %d fence %d", b, f)
		}
	})

	t.Run("NoSuchRowIsNotStale", func(t *testing.T) {
		err := leasehold.GuardedUpdate(ctx, db, write("nobody", 1, 5))
		if !errors.Is(err, leasehold.ErrRowNotFound) || errors.Is(err, leasehold.ErrStaleFence) {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("UpsertCreatesTheRow", func(t *testing.T) {
		if err := leasehold.GuardedUpsert(ctx, db, write("bob", 10, 3)); err != nil {
			t.Fatal(err)
		}
		if err := leasehold.GuardedUpsert(ctx, db, write("bob", 11, 3)); err != nil {
			t.Fatal(err)
		}
		stale(leasehold.GuardedUpsert(ctx, db, write("bob", 12, 2)), 2, 0)
		if err := leasehold.GuardedUpsert(ctx, db, write("bob", 13, 8)); err != nil {
			t.Fatal(err)
		}
		if b, f := balance("bob"); b != 13 || f != 8 {
			t.Fatalf("bob: balance %d fence %d", b, f)
		}
	})

	t.Run("InATransaction", func(t *testing.T) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := leasehold.GuardedUpdate(ctx, tx, write("bob", 14, 8)); err != nil {
			t.Fatal(err)
		}
		stale(leasehold.GuardedUpdate(ctx, tx, write("bob", 15, 7)), 7, 8)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if b, _ := balance("bob"); b != 14 {
			t.Fatalf("bob: balance %d", b)
		}
	})

	t.Run("NamesAreQuotedValuesBound", func(t *testing.T) {
		exec(`CREATE TABLE "Odd ""Table""" ("key" text PRIMARY KEY, "select" text, "Amount" int)`)
		m, err := leasehold.FenceMigration(`Odd "Table"`)
		if err != nil {
			t.Fatal(err)
		}
		exec(m)
		sneaky := `x'); DROP TABLE accounts; --`
		row := leasehold.FencedRow{Table: `Odd "Table"`, Key: leasehold.Column{Name: "key", Value: sneaky},
			Set: []leasehold.Column{{Name: "select", Value: sneaky}, {Name: "Amount", Value: 7}}, Fence: 1}
		if err := leasehold.GuardedUpsert(ctx, db, row); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := db.QueryRowContext(ctx, `SELECT "select" FROM "Odd ""Table""" WHERE "key" = $1`, sneaky).Scan(&got); err != nil || got != sneaky {
			t.Fatalf("%q %v", got, err)
		}
		// A column name is an identifier, never SQL: this one names no column.
		row.Set = []leasehold.Column{{Name: `Amount" = 0; DROP TABLE accounts; --`, Value: 1}}
		if err := leasehold.GuardedUpdate(ctx, db, row); err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("a column name pasted as SQL? %v", err)
		}
		balance("alice") // accounts is still there
	})

	t.Run("APausedHolderIsRefused", func(t *testing.T) {
		pausedHolderStory(t, db, write, balance)
	})
}

// pausedHolderStory: holder A takes lock L from a real broker and writes
// under its fence f1; A freezes (its traffic is held by a proxy, as a GC
// pause would hold it) past its TTL; B gets L with f2 > f1 and writes; A
// wakes and makes the write it was about to make, with f1: refused, and
// the row keeps B's write.
func pausedHolderStory(t *testing.T, db *sql.DB, write func(string, int64, uint64) leasehold.FencedRow, balance func(string) (int64, int64)) {
	ctx := bg(t)
	b := startBroker(t)
	proxy := startProxy(t, b.addr, 0)
	holderA, holderB := dial(t, proxy.addr), dial(t, b.addr)
	name := lockName(t)

	a, err := holderA.Acquire(ctx, name, leasehold.WithTTL(time.Second), leasehold.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	f1 := a.Fence()
	if err := leasehold.GuardedUpsert(ctx, db, write("carol", 1, f1)); err != nil {
		t.Fatal(err)
	}
	// A checks its lease before the write it is about to make...
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	proxy.pause() // ...and freezes: no heartbeat of A reaches the broker.

	// B waits in line until the broker expires A's lease.
	bl, err := holderB.Acquire(ctx, name, leasehold.WithTTL(10*time.Second), leasehold.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f2 := bl.Fence()
	if f2 <= f1 {
		t.Fatalf("B's fence %d is not above A's %d", f2, f1)
	}
	if err := leasehold.GuardedUpdate(ctx, db, write("carol", 2, f2)); err != nil {
		t.Fatal(err)
	}

	// A wakes and writes: the table refuses it.
	proxy.resume()
	err = leasehold.GuardedUpdate(ctx, db, write("carol", 3, f1))
	var e *leasehold.StaleFenceError
	if !errors.Is(err, leasehold.ErrStaleFence) || !errors.As(err, &e) || e.Fence != f1 || e.Stored != f2 {
		t.Fatalf("A's late write: %v", err)
	}
	if v, f := balance("carol"); v != 2 || uint64(f) != f2 {
		t.Fatalf("the row holds %d with fence %d, not B's write (2, fence %d)", v, f, f2)
	}
	// And A learns it lost the lease (its own deadline passed meanwhile).
	within(t, a.Done(), 5*time.Second, "A's Done")
	if !errors.Is(a.Err(), leasehold.ErrLost) {
		t.Fatalf("A: %v", a.Err())
	}
	if err := bl.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// CheckFence, for a resource that can store no fence (a mail sent, a
// payment API called): ask the broker just before the side effect whether
// the lease is still the current one. A's pause ends after B took the
// lock: A's check says not current, and A does not act.
func TestCheckFenceBeforeASideEffect(t *testing.T) {
	t.Parallel()
	ctx := bg(t)
	b := startBroker(t)
	proxy := startProxy(t, b.addr, 0)
	holderA, holderB := dial(t, proxy.addr), dial(t, b.addr)
	name := lockName(t)
	a, err := holderA.Acquire(ctx, name, leasehold.WithTTL(time.Second), leasehold.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	sendMail := func(c *leasehold.Client, fence uint64) error {
		current, currentFence, err := c.CheckFence(ctx, name, fence)
		if err != nil {
			return err
		}
		if !current {
			return &leasehold.StaleFenceError{Resource: "the nightly mail", Fence: fence, Stored: currentFence}
		}
		sent++
		return nil
	}
	if err := sendMail(holderA, a.Fence()); err != nil || sent != 1 {
		t.Fatalf("A's first mail: %v", err)
	}
	proxy.pause()
	bl, err := holderB.Acquire(ctx, name, leasehold.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	proxy.resume() // A wakes
	err = sendMail(holderA, a.Fence())
	var e *leasehold.StaleFenceError
	if !errors.Is(err, leasehold.ErrStaleFence) || !errors.As(err, &e) || e.Stored != bl.Fence() || sent != 1 {
		t.Fatalf("A's late mail: %v (%d sent)", err, sent)
	}
	if err := sendMail(holderB, bl.Fence()); err != nil || sent != 2 {
		t.Fatalf("B's mail: %v", err)
	}
}
