package leasehold

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// A lease alone cannot stop a holder that was paused (a GC pause, a frozen
// VM, a slow disk) past its TTL from writing after its successor did: the
// paused holder does not know it lost the lease until it looks, and it may
// be in the middle of a write. Only the storage can refuse that write, by
// remembering the highest fence it accepted. The helpers in this file make
// that one call for the two kinds of storage most applications write to: a
// SQL table (GuardedUpdate, GuardedUpsert) and an object store (GuardedPut).
// CheckFence is for resources that can remember nothing.

// ErrStaleFence: the storage refused a write because it already accepted
// one with a higher fence (a later holder of the lock wrote). The lease
// that wrote is lost, whatever its holder still believes: stop writing.
// Errors of the guards carry it as a *StaleFenceError.
var ErrStaleFence = errors.New("leasehold: stale fence")

// ErrRowNotFound: GuardedUpdate found no row with the key (nothing was
// written). Use GuardedUpsert for rows that may not exist yet.
var ErrRowNotFound = errors.New("leasehold: guarded update: no row with that key")

// StaleFenceError is a write the storage refused for its fence. It matches
// ErrStaleFence.
type StaleFenceError struct {
	// Resource is what was written: a table and key column, or an object key.
	Resource string
	// Fence is the fence the refused write carried.
	Fence uint64
	// Stored is the fence the storage held when the write was judged, when
	// the guard learnt it (0 otherwise). A concurrent writer can have raised
	// it further since; and GuardedUpdate reads it from the statement's
	// snapshot, so a writer that committed while the statement waited for
	// the row shows an older one.
	Stored uint64
}

func (e *StaleFenceError) Error() string {
	s := fmt.Sprintf("leasehold: write to %s with fence %d refused: a write with a higher fence came first (the lease was lost)", e.Resource, e.Fence)
	if e.Stored > e.Fence {
		s += fmt.Sprintf("; stored fence %d", e.Stored)
	}
	return s
}

// Is makes a *StaleFenceError match ErrStaleFence.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }

// FenceColumn is the column GuardedUpdate and GuardedUpsert keep the fence
// in unless FencedRow.FenceColumn names another.
const FenceColumn = "fence"

// FenceMigrationTemplate is the migration that gives a table its fence
// column, with <table> to fill in (FenceMigration does it, quoted). Rows
// that exist take fence 0, below every fence the broker grants, so that
// the first guarded write to each succeeds.
const FenceMigrationTemplate = "ALTER TABLE <table> ADD COLUMN IF NOT EXISTS fence bigint NOT NULL DEFAULT 0;"

// FenceMigration is FenceMigrationTemplate for table (a name, or
// schema.table; quoted as QuoteIdentifier does).
func FenceMigration(table string) (string, error) {
	t, err := quoteTable(table)
	if err != nil {
		return "", err
	}
	return strings.Replace(FenceMigrationTemplate, "<table>", t, 1), nil
}

// SQLExecutor runs statements: *sql.DB, *sql.Tx and *sql.Conn are ones.
type SQLExecutor interface {
	ExecContext(ctx context.Context, query string, args ...interface{}) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...interface{}) *sql.Row
}

// Column is a column's name and the value to write to it (a bound
// parameter: any value the driver takes).
type Column struct {
	Name  string
	Value interface{}
}

// FencedRow is a guarded write to one row of a PostgreSQL table: the
// columns Set to write, in the row whose Key column equals Key's value (a
// unique column: the upsert needs a unique constraint or primary key on
// it), under the lease's Fence.
//
// Names are identifiers as stored: quoted, so that a reserved word or any
// character is safe, and case-sensitive (a table created as Accounts
// without quotes is stored as accounts). Table may be schema.table (split
// at the dot). Values are always bound parameters, never pasted.
type FencedRow struct {
	Table string
	Key   Column
	Set   []Column
	// Fence is the lease's fence (Lease.Fence). At most math.MaxInt64: the
	// column is a bigint.
	Fence uint64
	// FenceColumn is the column holding the fence ("" for FenceColumn).
	FenceColumn string
}

// UpdateSQL is the guarded update for a SQL store other than PostgreSQL
// (with $n placeholders; change them for yours), and its arguments:
//
//	UPDATE t SET c1 = $3, ..., fence = $1 WHERE key = $2 AND fence <= $1
//
// One statement: the store checks the fence and writes atomically. Zero
// rows changed means the write was refused (stale) or there is no such
// row. GuardedUpdate runs a PostgreSQL form of it that tells the two apart.
func (r FencedRow) UpdateSQL() (string, []interface{}, error) {
	q, err := r.quoted()
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("UPDATE %s SET %s, %s = $1 WHERE %s = $2 AND %s <= $1", q.table, q.assignments, q.fence, q.key, q.fence), q.args, nil
}

// UpsertSQL is the guarded upsert (PostgreSQL's, and SQLite's since 3.24)
// and its arguments:
//
//	INSERT INTO t (key, c1, ..., fence) VALUES ($2, $3, ..., $1)
//	ON CONFLICT (key) DO UPDATE SET c1 = EXCLUDED.c1, ..., fence = EXCLUDED.fence
//	WHERE t.fence <= EXCLUDED.fence
//
// Zero rows changed means stale: the row exists with a higher fence.
func (r FencedRow) UpsertSQL() (string, []interface{}, error) {
	q, err := r.quoted()
	if err != nil {
		return "", nil, err
	}
	var cols, vals, sets []string
	for i, c := range q.columns {
		cols = append(cols, c)
		vals = append(vals, "$"+strconv.Itoa(i+3))
		sets = append(sets, c+" = EXCLUDED."+c)
	}
	return fmt.Sprintf("INSERT INTO %s AS t (%s, %s, %s) VALUES ($2, %s, $1) ON CONFLICT (%s) DO UPDATE SET %s, %s = EXCLUDED.%s WHERE t.%s <= EXCLUDED.%s",
		q.table, q.key, strings.Join(cols, ", "), q.fence, strings.Join(vals, ", "), q.key,
		strings.Join(sets, ", "), q.fence, q.fence, q.fence, q.fence), q.args, nil
}

// GuardedUpdate writes row.Set to the row whose key is row.Key, in one
// PostgreSQL statement, only if the row's fence is at most row.Fence, and
// stores row.Fence in it. Equal fences pass: the holder of one lease
// writes as often as it likes; its successor holds a strictly higher
// fence, after whose first write every write of the old holder is
// refused.
//
// It returns a *StaleFenceError (errors.Is(err, ErrStaleFence)) when the
// row holds a higher fence, and ErrRowNotFound when there is no such row;
// nothing was written then. The statement tells the two apart in the same
// snapshot as the write (a data-modifying WITH, PostgreSQL's), so there is
// no race between looking and writing: a row another transaction inserts
// meanwhile counts as absent, as the UPDATE would see it. For other SQL
// stores, run UpdateSQL and read zero rows changed as "stale or absent".
func GuardedUpdate(ctx context.Context, db SQLExecutor, row FencedRow) error {
	q, err := row.quoted()
	if err != nil {
		return err
	}
	// The outer SELECT reads the statement's snapshot: the row as it was
	// before the UPDATE (PostgreSQL shows no statement its own changes).
	stmt := fmt.Sprintf("WITH written AS (UPDATE %s SET %s, %s = $1 WHERE %s = $2 AND %s <= $1 RETURNING 1) "+
		"SELECT EXISTS (SELECT 1 FROM written), (SELECT %s FROM %s WHERE %s = $2)",
		q.table, q.assignments, q.fence, q.key, q.fence, q.fence, q.table, q.key)
	var written bool
	var stored sql.NullInt64
	if err := db.QueryRowContext(ctx, stmt, q.args...).Scan(&written, &stored); err != nil {
		return fmt.Errorf("leasehold: guarded update of %s: %w", q.resource, err)
	}
	switch {
	case written:
		return nil
	case !stored.Valid:
		return fmt.Errorf("%w (%s)", ErrRowNotFound, q.resource)
	}
	return &StaleFenceError{Resource: q.resource, Fence: row.Fence, Stored: uint64(stored.Int64)}
}

// GuardedUpsert writes the row (creating it if there is none with the key)
// in one statement (UpsertSQL), unless it exists with a higher fence: then
// it returns a *StaleFenceError (errors.Is(err, ErrStaleFence)) and writes
// nothing. The key column needs a unique constraint (or be the primary
// key).
func GuardedUpsert(ctx context.Context, db SQLExecutor, row FencedRow) error {
	stmt, args, err := row.UpsertSQL()
	if err != nil {
		return err
	}
	resource := row.resource()
	res, err := db.ExecContext(ctx, stmt, args...)
	if err != nil {
		return fmt.Errorf("leasehold: guarded upsert of %s: %w", resource, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("leasehold: guarded upsert of %s: %w", resource, err)
	}
	if n == 0 {
		return &StaleFenceError{Resource: resource, Fence: row.Fence}
	}
	return nil
}

// QuoteIdentifier quotes a SQL identifier (a table or column name) as the
// SQL standard and PostgreSQL do: in double quotes, a double quote
// doubled. An empty name or one holding a NUL character is refused.
func QuoteIdentifier(name string) (string, error) {
	if name == "" {
		return "", errors.New("leasehold: an empty SQL identifier")
	}
	if strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("leasehold: SQL identifier %q holds a NUL character", name)
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`, nil
}

func quoteTable(table string) (string, error) {
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("leasehold: table %q: a name or schema.table", table)
	}
	for i, p := range parts {
		q, err := QuoteIdentifier(p)
		if err != nil {
			return "", fmt.Errorf("leasehold: table %q: %w", table, err)
		}
		parts[i] = q
	}
	return strings.Join(parts, "."), nil
}

type quotedRow struct {
	table, key, fence, assignments, resource string
	columns                                  []string
	args                                     []interface{}
}

func (r FencedRow) resource() string {
	return fmt.Sprintf("table %s (key column %s)", r.Table, r.Key.Name)
}

// quoted checks the row and quotes its names: $1 is the fence, $2 the
// key, $3... the columns set, in order.
func (r FencedRow) quoted() (quotedRow, error) {
	q := quotedRow{resource: r.resource()}
	if r.Fence > math.MaxInt64 {
		return q, fmt.Errorf("leasehold: fence %d does not fit a bigint column", r.Fence)
	}
	if len(r.Set) == 0 {
		return q, fmt.Errorf("leasehold: guarded write of %s: no column to set", q.resource)
	}
	var err error
	if q.table, err = quoteTable(r.Table); err != nil {
		return q, err
	}
	if q.key, err = QuoteIdentifier(r.Key.Name); err != nil {
		return q, fmt.Errorf("leasehold: key column: %w", err)
	}
	fenceCol := r.FenceColumn
	if fenceCol == "" {
		fenceCol = FenceColumn
	}
	if q.fence, err = QuoteIdentifier(fenceCol); err != nil {
		return q, fmt.Errorf("leasehold: fence column: %w", err)
	}
	q.args = []interface{}{int64(r.Fence), r.Key.Value}
	var assignments []string
	for i, c := range r.Set {
		col, err := QuoteIdentifier(c.Name)
		if err != nil {
			return q, fmt.Errorf("leasehold: column: %w", err)
		}
		if col == q.fence || col == q.key {
			return q, fmt.Errorf("leasehold: guarded write of %s: column %s is the key or the fence, which the guard sets", q.resource, c.Name)
		}
		q.columns = append(q.columns, col)
		assignments = append(assignments, col+" = $"+strconv.Itoa(i+3))
		q.args = append(q.args, c.Value)
	}
	q.assignments = strings.Join(assignments, ", ")
	return q, nil
}
