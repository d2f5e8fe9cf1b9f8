// The fence guards (src/fence.ts) against a real PostgreSQL started here
// (helpers.mjs: initdb in a temp dir, a free loopback port) and a real
// broker; the object-store guard against an in-memory store that enforces
// If-Match / If-None-Match as S3 does (HTTP 412), behind the same adapter the
// README shows for the AWS SDK.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import {
  connect, fenceMigration, guardedPut, guardedUpdate, guardedUpdateQuery, guardedUpsert, quoteIdent,
  LeaseholdError, RowNotFoundError, StaleFenceError,
} from '@leasehold/client';
import { MIN_TTL, lockName, postgresBin, startBroker, startPostgres, stopProcess } from './helpers.mjs';

describe('SQL fence guard: the statements', () => {
  test('identifiers are quoted (a double quote doubled), values are parameters, $1 is the fence', () => {
    assert.equal(quoteIdent('accounts'), '"accounts"');
    assert.equal(quoteIdent('we"ird'), '"we""ird"');
    assert.throws(() => quoteIdent(''), LeaseholdError);
    assert.throws(() => quoteIdent('a\0b'), LeaseholdError);
    const q = guardedUpdateQuery({ table: ['billing', 'Accounts'], key: { id: 7 }, set: { 'x"; DROP TABLE t; --': 'v' }, fence: 12n });
    assert.match(q.text, /^WITH written AS \(UPDATE "billing"\."Accounts" SET "x""; DROP TABLE t; --" = \$3, "fence" = \$1 WHERE "id" = \$2 AND "fence" <= \$1 RETURNING 1\)/);
    assert.deepEqual(q.values, ['12', 7, 'v']);
    assert.equal(fenceMigration('accounts'), 'ALTER TABLE "accounts" ADD COLUMN IF NOT EXISTS "fence" bigint NOT NULL DEFAULT 0;');
    assert.equal(fenceMigration(['s', 't'], 'lock_version'), 'ALTER TABLE "s"."t" ADD COLUMN IF NOT EXISTS "lock_version" bigint NOT NULL DEFAULT 0;');
  });

  test('refused before any query: the fence column in set, no key, a fence that is not one', () => {
    const base = { table: 't', key: { id: 1 }, set: { v: 1 }, fence: 1n };
    assert.throws(() => guardedUpdateQuery({ ...base, set: { fence: 3 } }), /the fence column "fence" is written by the guard/);
    assert.throws(() => guardedUpdateQuery({ ...base, key: {} }), /key must name at least one column/);
    assert.throws(() => guardedUpdateQuery({ ...base, fence: 'x' }), /fence must be a lease's fence/);
    assert.throws(() => guardedUpdateQuery({ ...base, fence: 2 ** 60 }), /not a safe integer/);
    assert.throws(() => guardedUpdateQuery({ ...base, table: 'a.b'.split('.').concat('c') }), /table must be a name or a \[schema, name\] pair/);
  });
});

// Without PostgreSQL installed these skip, except in CI (postgresBin throws).
const havePostgres = postgresBin() !== null;

describe('SQL fence guard on PostgreSQL', { skip: !havePostgres && 'no PostgreSQL installed (run-tests.sh installs it)' }, () => {
  let server, db, broker;
  before(async () => {
    [server, broker] = await Promise.all([startPostgres(), startBroker()]);
    db = new pg.Client(server.config);
    await db.connect();
  });
  after(async () => {
    await db?.end().catch(() => {});
    await Promise.all([server?.stop(), broker?.kill()]);
  });

  // A fresh table with the migration applied (twice: it is idempotent).
  async function table(name, rows = []) {
    await db.query(`DROP TABLE IF EXISTS ${quoteIdent(name)}`);
    await db.query(`CREATE TABLE ${quoteIdent(name)} (id int PRIMARY KEY, owner text NOT NULL DEFAULT '', balance int NOT NULL DEFAULT 0)`);
    await db.query(fenceMigration(name));
    await db.query(fenceMigration(name));
    for (const [id, owner, balance] of rows) await db.query(`INSERT INTO ${quoteIdent(name)} (id, owner, balance) VALUES ($1, $2, $3)`, [id, owner, balance]);
  }
  const row = async (name, id) => (await db.query(`SELECT owner, balance, fence::text AS fence FROM ${quoteIdent(name)} WHERE id = $1`, [id])).rows[0];

  test('the GC-pause story: a paused holder\'s late write is refused once the next holder has written', async () => {
    await table('accounts', [[1, '', 0]]);
    const name = lockName('gc-pause');
    const holder = spawn(process.execPath, [fileURLToPath(new URL('./paused-holder.mjs', import.meta.url)), broker.address, String(server.port), name, String(MIN_TTL)],
      { stdio: ['pipe', 'pipe', 'pipe'] });
    let stderr = '';
    holder.stderr.on('data', (d) => (stderr += d));
    const exited = new Promise((resolve) => holder.once('exit', (code, signal) => resolve({ code, signal })));
    const steps = createInterface({ input: holder.stdout })[Symbol.asyncIterator]();
    const step = async (want) => {
      const { value, done } = await steps.next();
      assert.ok(!done, `holder A ended before "${want}": ${stderr}`);
      const line = JSON.parse(value);
      assert.equal(line.step, want);
      return line;
    };
    const b = connect(broker.address, { logger: null });
    try {
      const f1 = BigInt((await step('wrote')).fence);
      assert.deepEqual(await row('accounts', 1), { owner: 'A', balance: 100, fence: String(f1) });
      await step('checked');
      await stopProcess(holder, 'holder A'); // the pause: no heartbeat, no write

      // B waits for the lock: granted once A's lease expires on the broker.
      const lease = await b.acquire(name, { ttlMs: 10_000, waitMs: 10_000 });
      assert.ok(lease.fence > f1, `B's fence ${lease.fence} is above A's ${f1}`);
      await guardedUpdate(db, { table: 'accounts', key: { id: 1 }, set: { owner: 'B', balance: 200 }, fence: lease.fence });

      holder.kill('SIGCONT'); // A wakes up and makes the write it was about to make
      holder.stdin.write('write\n');
      const late = await step('late write');
      assert.equal(late.result, 'StaleFenceError', late.message);
      assert.equal(late.fence, String(f1));
      assert.equal(late.currentFence, String(lease.fence));
      assert.deepEqual(await row('accounts', 1), { owner: 'B', balance: 200, fence: String(lease.fence) });
      assert.deepEqual(await exited, { code: 0, signal: null }, stderr);
      await lease.release();
    } finally {
      holder.kill('SIGKILL');
      await b.close();
    }
  });

  test('equal fences pass (one holder writes many times); a lower one is refused with the fence that stopped it', async () => {
    await table('eq', [[1, '', 0]]);
    const w = (balance, fence) => guardedUpdate(db, { table: 'eq', key: { id: 1 }, set: { balance }, fence });
    await w(1, 5n);
    await w(2, 5n);
    await w(3, '5');
    assert.deepEqual(await row('eq', 1), { owner: '', balance: 3, fence: '5' });
    const err = await w(4, 4n).then(() => null, (e) => e);
    assert.ok(err instanceof StaleFenceError, String(err));
    assert.equal(err.fence, 4n);
    assert.equal(err.currentFence, 5n);
    assert.match(err.message, /fence 4 is stale \(the storage holds fence 5\)/);
    assert.deepEqual(await row('eq', 1), { owner: '', balance: 3, fence: '5' });
    await w(5, 6n); // a newer holder
    assert.deepEqual(await row('eq', 1), { owner: '', balance: 5, fence: '6' });
  });

  test('no such row: RowNotFoundError, not stale; the upsert creates the row, then refuses lower fences', async () => {
    await table('up');
    const err = await guardedUpdate(db, { table: 'up', key: { id: 9 }, set: { balance: 1 }, fence: 3n }).then(() => null, (e) => e);
    assert.ok(err instanceof RowNotFoundError, String(err));
    assert.ok(!(err instanceof StaleFenceError));
    assert.equal(await row('up', 9), undefined);

    const up = (balance, fence) => guardedUpsert(db, { table: 'up', key: { id: 9 }, set: { owner: 'u', balance }, fence });
    await up(10, 3n);
    assert.deepEqual(await row('up', 9), { owner: 'u', balance: 10, fence: '3' });
    await up(11, 3n);
    await up(12, 4n);
    const stale = await up(13, 3n).then(() => null, (e) => e);
    assert.ok(stale instanceof StaleFenceError, String(stale));
    assert.equal(stale.fence, 3n);
    assert.deepEqual(await row('up', 9), { owner: 'u', balance: 12, fence: '4' });
  });

  test('identifiers are quoted against the real server: odd names work, an injection attempt is only a wrong column name', async () => {
    await db.query('DROP SCHEMA IF EXISTS "Odd Schema" CASCADE');
    await db.query('CREATE SCHEMA "Odd Schema"');
    await db.query('CREATE TABLE "Odd Schema"."we""ird table" ("key col" text PRIMARY KEY, "select" int NOT NULL)');
    const t = ['Odd Schema', 'we"ird table'];
    await db.query(fenceMigration(t, 'Lock Version'));
    await guardedUpsert(db, { table: t, key: { 'key col': 'k' }, set: { select: 1 }, fence: 2n, fenceColumn: 'Lock Version' });
    await guardedUpdate(db, { table: t, key: { 'key col': 'k' }, set: { select: 2 }, fence: 2n, fenceColumn: 'Lock Version' });
    await assert.rejects(guardedUpdate(db, { table: t, key: { 'key col': 'k' }, set: { select: 3 }, fence: 1n, fenceColumn: 'Lock Version' }), StaleFenceError);
    const { rows } = await db.query('SELECT "select", "Lock Version"::text AS f FROM "Odd Schema"."we""ird table"');
    assert.deepEqual(rows, [{ select: 2, f: '2' }]);

    await assert.rejects(
      guardedUpdate(db, { table: t, key: { 'key col': 'k' }, set: { 'select" = 9; DROP TABLE "Odd Schema"."we""ird table"; --': 1 }, fence: 5n, fenceColumn: 'Lock Version' }),
      (err) => err.code === '42703', // undefined_column: the whole text was one (quoted) name
    );
    assert.equal((await db.query('SELECT count(*)::int AS n FROM "Odd Schema"."we""ird table"')).rows[0].n, 1);
  });

  test('a pg.Pool fits as well as a pg.Client', async () => {
    await table('pool', [[1, '', 0]]);
    const pool = new pg.Pool({ ...server.config, max: 2 });
    try {
      await guardedUpdate(pool, { table: 'pool', key: { id: 1 }, set: { balance: 7 }, fence: 1n });
      await assert.rejects(guardedUpdate(pool, { table: 'pool', key: { id: 1 }, set: { balance: 8 }, fence: 0n }), StaleFenceError);
      assert.deepEqual(await row('pool', 1), { owner: '', balance: 7, fence: '1' });
    } finally {
      await pool.end();
    }
  });
});

// -- object stores ---------------------------------------------------------------

// An object store that keeps objects in memory and judges PutObject's
// preconditions as S3 does: If-None-Match: * fails with 412 when the key
// exists, If-Match fails with 412 when it does not or the ETag differs. A new
// ETag per write. `beforePut` runs between a request's arrival and its
// judgment: another writer's put lands there (the race the guard must lose
// safely).
class MemoryS3 {
  objects = new Map();
  writes = 0;
  beforePut = null;
  async headObject({ Key }) {
    const o = this.objects.get(Key);
    if (!o) throw Object.assign(new Error('NotFound'), { $metadata: { httpStatusCode: 404 } });
    return { ETag: o.etag, Metadata: { ...o.metadata } };
  }
  async putObject({ Key, Body, IfMatch, IfNoneMatch, Metadata = {} }) {
    const hook = this.beforePut;
    this.beforePut = null;
    if (hook) await hook();
    const o = this.objects.get(Key);
    if (IfNoneMatch === '*' && o) throw Object.assign(new Error('PreconditionFailed'), { $metadata: { httpStatusCode: 412 } });
    if (IfMatch !== undefined && (!o || o.etag !== IfMatch)) throw Object.assign(new Error('PreconditionFailed'), { $metadata: { httpStatusCode: 412 } });
    const etag = `"${(++this.writes).toString(16).padStart(32, '0')}"`;
    this.objects.set(Key, { body: Body, etag, metadata: { ...Metadata } });
    return { ETag: etag };
  }
}

// The adapter, as the README's for the AWS SDK v3 (there s3.send(new
// HeadObjectCommand(...)) and PutObjectCommand).
function adapter(s3, puts = []) {
  return {
    async head(key) {
      try {
        const h = await s3.headObject({ Key: key });
        return { etag: h.ETag, fence: h.Metadata?.fence ?? null };
      } catch (err) {
        if (err.$metadata?.httpStatusCode === 404) return null;
        throw err;
      }
    },
    async put(key, body, precondition, fence) {
      puts.push(precondition);
      try {
        await s3.putObject({ Key: key, Body: body, IfMatch: precondition.ifMatch, IfNoneMatch: precondition.ifNoneMatch, Metadata: { fence: String(fence) } });
        return true;
      } catch (err) {
        if (err.$metadata?.httpStatusCode === 412 || err.$metadata?.httpStatusCode === 409) return false;
        throw err;
      }
    },
  };
}

describe('object-store fence guard (an in-memory store with S3\'s preconditions)', () => {
  test('a new object is created with If-None-Match: *; the same fence overwrites with If-Match; a lower one is refused without a put', async () => {
    const s3 = new MemoryS3();
    const puts = [];
    const store = adapter(s3, puts);
    await guardedPut(store, 'report.csv', 'v1', 5n);
    assert.deepEqual(puts, [{ ifNoneMatch: '*' }]);
    const etag = s3.objects.get('report.csv').etag;
    await guardedPut(store, 'report.csv', 'v2', 5n);
    assert.deepEqual(puts[1], { ifMatch: etag });
    assert.equal(s3.objects.get('report.csv').body, 'v2');
    const err = await guardedPut(store, 'report.csv', 'old', 4n).then(() => null, (e) => e);
    assert.ok(err instanceof StaleFenceError, String(err));
    assert.equal(err.fence, 4n);
    assert.equal(err.currentFence, 5n);
    assert.equal(puts.length, 2, 'no put for a stale fence');
    assert.deepEqual(s3.objects.get('report.csv').metadata, { fence: '5' });
    assert.equal(s3.objects.get('report.csv').body, 'v2');
  });

  test('an object written without a fence may be overwritten by any fence', async () => {
    const s3 = new MemoryS3();
    await s3.putObject({ Key: 'k', Body: 'unguarded' });
    await guardedPut(adapter(s3), 'k', 'guarded', 1n);
    assert.deepEqual(s3.objects.get('k'), { body: 'guarded', etag: s3.objects.get('k').etag, metadata: { fence: '1' } });
  });

  test('a newer holder writes between the old one\'s head and put: the put fails 412, the read again finds the higher fence: stale', async () => {
    const s3 = new MemoryS3();
    const store = adapter(s3);
    await guardedPut(store, 'k', 'old-1', 3n);
    s3.beforePut = () => guardedPut(store, 'k', 'new', 4n);
    const err = await guardedPut(store, 'k', 'old-2', 3n).then(() => null, (e) => e);
    assert.ok(err instanceof StaleFenceError, String(err));
    assert.equal(err.currentFence, 4n);
    assert.equal(s3.objects.get('k').body, 'new');
    assert.deepEqual(s3.objects.get('k').metadata, { fence: '4' });
  });

  test('two creators race for a new object: the one that loses reads it and, its fence being higher, overwrites it', async () => {
    const s3 = new MemoryS3();
    const puts = [];
    const store = adapter(s3, puts);
    let first;
    s3.beforePut = async () => { first = (await s3.putObject({ Key: 'k', Body: 'first', IfNoneMatch: '*', Metadata: { fence: '1' } })).ETag; };
    await guardedPut(store, 'k', 'second', 2n);
    assert.deepEqual(puts, [{ ifNoneMatch: '*' }, { ifMatch: first }], 'refused as a creation, then made conditional on the object read');
    assert.equal(s3.objects.get('k').body, 'second');
    assert.deepEqual(s3.objects.get('k').metadata, { fence: '2' });
  });

  test('an object that changes between every read and write: given up after the attempts allowed', async () => {
    const s3 = new MemoryS3();
    const store = adapter(s3);
    await guardedPut(store, 'k', 'v', 1n);
    let interlopers = 0;
    const original = s3.putObject.bind(s3);
    s3.putObject = async (args) => {
      if (args.Body === 'mine') {
        interlopers += 1;
        await original({ Key: 'k', Body: `other-${interlopers}`, Metadata: { fence: '1' } });
      }
      return original(args);
    };
    await assert.rejects(guardedPut(store, 'k', 'mine', 1n, { attempts: 3 }), (err) => err instanceof LeaseholdError && !(err instanceof StaleFenceError)
      && /changed between read and write 3 times in a row/.test(err.message));
    assert.equal(interlopers, 3);
  });
});
