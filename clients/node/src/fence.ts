// Fence guards: the storage side of fencing, where a lease alone cannot help.
//
// A holder paused past its TTL (a GC pause, a stopped VM, a slow disk) wakes
// up still believing it holds the lock, and writes. Only the storage can
// refuse that write: it remembers the highest fence it accepted and refuses
// a lower one. Two stores are covered here, without depending on their
// drivers (the application brings its own):
//
// - SQL (PostgreSQL through node-postgres, any driver with the same query
//   shape): a `fence` column, written in the same single statement as the
//   data, only where the stored fence is not higher than the writer's.
// - Object stores (S3, GCS): the object's fence in its user metadata, and a
//   conditional write (If-Match on the ETag read, If-None-Match: * for a new
//   object) so that nobody writes between the check and the put.
//
// Equal fences pass (`<=`): the holder of one lease writes many times under
// it; the next holder's fence is strictly higher, so once it has written, the
// old holder's late writes are refused.
import { LeaseholdError } from './errors';
import type { Fence } from './client';

/** The column the guards keep the fence in, unless told otherwise. */
export const FENCE_COLUMN = 'fence';

/**
 * The migration that gives a table its fence column (0 for existing rows: any
 * lease's fence passes it once):
 * `ALTER TABLE <table> ADD COLUMN IF NOT EXISTS fence bigint NOT NULL DEFAULT 0;`
 * with `<table>` (and the column, if not `fence`) quoted.
 *
 * A bigint holds fences up to 2^63 - 1; the broker's fences start at 1 and
 * grow by at least one per grant, so that is never reached in practice.
 */
export function fenceMigration(table: Table, column: string = FENCE_COLUMN): string {
  return `ALTER TABLE ${quoteTable(table)} ADD COLUMN IF NOT EXISTS ${quoteIdent(column)} bigint NOT NULL DEFAULT 0;`;
}

/**
 * A table: a name (one identifier, quoted as it is: `'jobs'`), or a schema
 * and a name (`['billing', 'jobs']`). A string with a dot is one identifier
 * with a dot in it, not a schema: give an array for that.
 */
export type Table = string | readonly [schema: string, table: string];

/**
 * An SQL identifier quoted for PostgreSQL (and the SQL standard): in double
 * quotes, a double quote in it doubled. Quoted identifiers are case-sensitive:
 * `quoteIdent('Jobs')` names `"Jobs"`, not `jobs`. Refuses an empty name and
 * a NUL character (no SQL store accepts them).
 */
export function quoteIdent(name: string): string {
  if (typeof name !== 'string' || name.length === 0) throw new LeaseholdError(`an SQL identifier must be a non-empty string, got ${JSON.stringify(name)}`);
  if (name.includes('\0')) throw new LeaseholdError('an SQL identifier cannot contain a NUL character');
  return `"${name.replace(/"/g, '""')}"`;
}

function quoteTable(table: Table): string {
  if (typeof table === 'string') return quoteIdent(table);
  if (Array.isArray(table) && table.length === 2) return `${quoteIdent(table[0])}.${quoteIdent(table[1])}`;
  throw new LeaseholdError(`table must be a name or a [schema, name] pair, got ${JSON.stringify(table)}`);
}

/**
 * What the SQL guards need of a database connection: node-postgres's
 * `pg.Client`, `pg.Pool` and `pg.PoolClient` fit as they are. `rows` is only
 * read by guardedUpdate (to tell a missing row from a stale write).
 */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rowCount: number | null; rows?: any[] }>;
}

/** A guarded write: the row (by its key columns), the values to set, and the writer's fence. */
export interface GuardedWrite {
  /** The table (quoted: see Table). */
  table: Table;
  /** The row's key: column → value, every one must match (the primary key, or a unique key for guardedUpsert). */
  key: Readonly<Record<string, unknown>>;
  /** The columns to write: column → value (bound parameters, never pasted into the SQL). */
  set: Readonly<Record<string, unknown>>;
  /** The fence of the lease the write is made under (`lease.fence`). */
  fence: Fence;
  /** The fence column. Default `fence`. */
  fenceColumn?: string;
}

/** An SQL statement and its parameters, as node-postgres takes them. */
export interface Query {
  text: string;
  values: unknown[];
}

/**
 * A write refused because the storage holds a higher fence: a newer lease
 * was granted and its holder wrote. Stop: this process no longer holds the
 * lock, whatever it believes (`lease.check()` may not know yet).
 */
export class StaleFenceError extends LeaseholdError {
  /** The fence the refused write carried. */
  readonly fence: bigint;
  /** The fence the storage held, when it said (null when it did not). */
  readonly currentFence: bigint | null;
  /** What was written to: the table or the object key. */
  readonly target: string;
  constructor(target: string, fence: bigint, currentFence: bigint | null) {
    super(`write to ${target} refused: fence ${fence} is stale${currentFence === null ? '' : ` (the storage holds fence ${currentFence})`}: a newer lease holder has written`);
    this.name = 'StaleFenceError';
    this.target = target;
    this.fence = fence;
    this.currentFence = currentFence;
  }
}

/** guardedUpdate found no row with that key: nothing was written (guardedUpsert creates rows). */
export class RowNotFoundError extends LeaseholdError {
  readonly table: string;
  constructor(table: string, key: Readonly<Record<string, unknown>>) {
    super(`no row of ${table} has ${Object.entries(key).map(([k, v]) => `${k} = ${String(v)}`).join(' and ')}: nothing was written`);
    this.name = 'RowNotFoundError';
    this.table = table;
  }
}

/** A fence as the decimal string the drivers bind (a BigInt is not JSON, and a number could round). */
function fenceValue(fence: Fence): string {
  let value: bigint;
  try {
    value = BigInt(fence);
  } catch {
    throw new LeaseholdError(`fence must be a lease's fence (a BigInt, a safe integer or a decimal string), got ${String(fence)}`);
  }
  if (typeof fence === 'number' && !Number.isSafeInteger(fence)) throw new LeaseholdError(`fence ${fence} is not a safe integer: pass lease.fence (a BigInt)`);
  if (value < 0n) throw new LeaseholdError(`fence must not be negative, got ${value}`);
  if (value > 0x7fff_ffff_ffff_ffffn) throw new LeaseholdError(`fence ${value} does not fit the bigint fence column`);
  return value.toString();
}

function columns(what: string, record: Readonly<Record<string, unknown>>): [string, unknown][] {
  const entries = record && typeof record === 'object' ? Object.entries(record) : [];
  if (entries.length === 0) throw new LeaseholdError(`${what} must name at least one column`);
  return entries;
}

function checked(write: GuardedWrite): { table: string; fenceColumn: string; key: [string, unknown][]; set: [string, unknown][]; fence: string } {
  const fenceColumn = write.fenceColumn ?? FENCE_COLUMN;
  const key = columns('key', write.key);
  const set = columns('set', write.set);
  for (const [column] of [...key, ...set]) {
    if (column === fenceColumn) throw new LeaseholdError(`the fence column ${JSON.stringify(column)} is written by the guard: leave it out of key and set`);
  }
  return { table: quoteTable(write.table), fenceColumn: quoteIdent(fenceColumn), key, set, fence: fenceValue(write.fence) };
}

/**
 * The statement of guardedUpdate: the contract's one-statement update,
 *
 *     UPDATE t SET c = $3, ..., fence = $1 WHERE k = $2 AND fence <= $1
 *
 * inside a CTE whose outer SELECT also reads the row's fence as the
 * statement's snapshot saw it, so that one round trip tells the three
 * outcomes apart: `written` 1 (done), else `current` NULL (no such row) or
 * the fence that stopped the write. $1 is the fence, then the key values,
 * then the values set.
 */
export function guardedUpdateQuery(write: GuardedWrite): Query {
  const { table, fenceColumn, key, set, fence } = checked(write);
  const values: unknown[] = [fence];
  const where = key.map(([column, value]) => { values.push(value); return `${quoteIdent(column)} = $${values.length}`; }).join(' AND ');
  const assign = set.map(([column, value]) => { values.push(value); return `${quoteIdent(column)} = $${values.length}`; });
  const text = `WITH written AS (UPDATE ${table} SET ${assign.join(', ')}, ${fenceColumn} = $1 WHERE ${where} AND ${fenceColumn} <= $1 RETURNING 1) `
    + `SELECT (SELECT count(*) FROM written)::int AS written, (SELECT ${fenceColumn}::text FROM ${table} WHERE ${where}) AS current`;
  return { text, values };
}

/**
 * The statement of guardedUpsert: the row is inserted with the fence, or,
 * if its key exists, updated only where the stored fence is not higher:
 *
 *     INSERT INTO t (k, c, ..., fence) VALUES ($2, $3, ..., $1)
 *     ON CONFLICT (k) DO UPDATE SET c = EXCLUDED.c, ..., fence = EXCLUDED.fence
 *     WHERE t.fence <= EXCLUDED.fence
 *
 * No row changed means a higher fence stopped it. The key columns must carry
 * a unique index or constraint (ON CONFLICT needs one).
 */
export function guardedUpsertQuery(write: GuardedWrite): Query {
  const { table, fenceColumn, key, set, fence } = checked(write);
  const values: unknown[] = [fence];
  const names: string[] = [];
  const params: string[] = [];
  for (const [column, value] of [...key, ...set]) {
    values.push(value);
    names.push(quoteIdent(column));
    params.push(`$${values.length}`);
  }
  const conflict = key.map(([column]) => quoteIdent(column)).join(', ');
  const assign = set.map(([column]) => `${quoteIdent(column)} = EXCLUDED.${quoteIdent(column)}`);
  const text = `INSERT INTO ${table} AS t (${names.join(', ')}, ${fenceColumn}) VALUES (${params.join(', ')}, $1) `
    + `ON CONFLICT (${conflict}) DO UPDATE SET ${assign.join(', ')}, ${fenceColumn} = EXCLUDED.${fenceColumn} `
    + `WHERE t.${fenceColumn} <= EXCLUDED.${fenceColumn}`;
  return { text, values };
}

function describeTable(table: Table): string {
  return typeof table === 'string' ? table : table.join('.');
}

/**
 * Updates one row (by `key`) with `set` and the fence, in one statement,
 * only if the row's stored fence is not higher than `fence`. Resolves once
 * written. Rejects with StaleFenceError (nothing written: a newer lease
 * holder wrote the row; `currentFence` is the fence that stopped it) or
 * RowNotFoundError (no row has that key; guardedUpsert creates it).
 *
 * `db` is a node-postgres `Client`, `Pool` or `PoolClient`, or anything with
 * the same `query(text, values)`. One statement, no transaction needed: the
 * update takes the row's lock and checks the fence of its latest version.
 * The `current` fence reported is the statement snapshot's: a row deleted
 * while the update ran is reported stale (it was not written either way).
 */
export async function guardedUpdate(db: Queryable, write: GuardedWrite): Promise<void> {
  const { text, values } = guardedUpdateQuery(write);
  const result = await db.query(text, values);
  const row = result.rows?.[0];
  if (!row) throw new LeaseholdError('guardedUpdate: the database returned no row for its SELECT: is db a PostgreSQL connection?');
  if (Number(row.written) > 0) return;
  const table = describeTable(write.table);
  if (row.current === null || row.current === undefined) throw new RowNotFoundError(table, write.key);
  throw new StaleFenceError(table, BigInt(fenceValue(write.fence)), BigInt(row.current));
}

/**
 * Inserts the row (`key` and `set`, with the fence), or updates it if its
 * key exists and its stored fence is not higher than `fence`, in one
 * statement. Rejects with StaleFenceError when a higher fence stopped it
 * (`currentFence` null: the statement does not read it).
 */
export async function guardedUpsert(db: Queryable, write: GuardedWrite): Promise<void> {
  const { text, values } = guardedUpsertQuery(write);
  const result = await db.query(text, values);
  if ((result.rowCount ?? 0) > 0) return;
  throw new StaleFenceError(describeTable(write.table), BigInt(fenceValue(write.fence)), null);
}

// -- object stores -------------------------------------------------------------

/** What a HEAD of an object tells the guard. */
export interface ObjectHead {
  /** The object's ETag, as the store gives it (quotes included): the guard sends it back as If-Match. */
  etag: string;
  /**
   * The fence in the object's metadata (`x-amz-meta-fence`, `x-goog-meta-fence`):
   * a BigInt, or its decimal string; null or undefined for an object written
   * without one (any fence may overwrite it).
   */
  fence?: bigint | string | null;
}

/** The precondition of a guarded put: exactly one of the two is set. */
export interface PutPrecondition {
  /** Write only if the object's ETag is still this one (it existed). */
  ifMatch?: string;
  /** `'*'`: write only if the object still does not exist. */
  ifNoneMatch?: '*';
}

/**
 * An object store as the guard uses it: plug in your SDK (the README shows
 * the adapter for the AWS SDK v3; GCS's generation preconditions fit the same
 * way).
 */
export interface ObjectStoreAdapter<Body = unknown> {
  /** The object's ETag and fence, or null if it does not exist (a 404). */
  head(key: string): Promise<ObjectHead | null>;
  /**
   * Writes `body` with `fence` in the object's metadata, sending the
   * precondition (If-Match / If-None-Match). Resolves true once written,
   * false when the store refused the precondition (HTTP 412 Precondition
   * Failed; S3's 409 ConditionalRequestConflict, a concurrent conditional
   * write, counts too). Rejects for any other failure.
   */
  put(key: string, body: Body, precondition: PutPrecondition, fence: bigint): Promise<boolean>;
}

/** How many times guardedPut reads and tries again after a refused precondition, unless told. */
export const GUARDED_PUT_ATTEMPTS = 5;

/**
 * Writes `body` to `key` under `fence`, unless the object holds a higher
 * fence: reads the object's ETag and fence (head), refuses with
 * StaleFenceError if its fence is higher, else puts with the fence in the
 * metadata and a precondition that the object is still the one read
 * (If-Match: its ETag, or If-None-Match: * when there was none). A refused
 * precondition (someone wrote in between) starts over: the new object's
 * fence decides. Rejects with a LeaseholdError after `attempts` refusals in
 * a row (the object keeps changing).
 *
 * Equal fences pass, as in SQL: the holder of one lease writes many times.
 */
export async function guardedPut<Body>(store: ObjectStoreAdapter<Body>, key: string, body: Body, fence: Fence,
  options: { attempts?: number } = {}): Promise<void> {
  const mine = BigInt(fenceValue(fence));
  const attempts = options.attempts ?? GUARDED_PUT_ATTEMPTS;
  if (!Number.isInteger(attempts) || attempts < 1) throw new LeaseholdError(`attempts must be a positive integer, got ${String(attempts)}`);
  for (let attempt = 1; attempt <= attempts; attempt++) {
    const head = await store.head(key);
    const stored = head?.fence == null || head.fence === '' ? null : storedFence(key, head.fence);
    if (stored !== null && stored > mine) throw new StaleFenceError(key, mine, stored);
    const precondition: PutPrecondition = head ? { ifMatch: head.etag } : { ifNoneMatch: '*' };
    if (await store.put(key, body, precondition, mine)) return;
  }
  throw new LeaseholdError(`write to ${key} not made: the object changed between read and write ${attempts} times in a row`);
}

function storedFence(key: string, fence: bigint | string): bigint {
  try {
    return BigInt(fence);
  } catch {
    throw new LeaseholdError(`object ${key} has a fence in its metadata that is not a number: ${JSON.stringify(String(fence))}`);
  }
}
