// Listing against a real broker (helpers.mjs): listPage's pages and list()'s
// walk over them; the page-size refusal; an administrator's listing of every
// tenant (serve --auth-file); a walk on a Redis store.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as connectLoud, LeaseholdError, status } from '@leasehold/client';
import { eventually, haveRedis, lockName, startBroker, startRedis } from './helpers.mjs';

const connect = (target, options = {}) => connectLoud(target, { logger: null, ...options });
const TTL = 10_000;

async function collect(iterable) {
  const all = [];
  for await (const item of iterable) all.push(item);
  return all;
}

// Under `prefix`: two locks (a, b) and a semaphore with two of its three
// permits taken; a caller waiting in a's line; a lock outside the prefix
// whose name starts like it.
async function scene(client, other, what) {
  const base = lockName(what);
  const s = { prefix: `${base}/`, a: `${base}/a`, b: `${base}/b`, sem: `${base}/sem`, outside: `${base}-outside/c` };
  s.leaseA = await client.acquire(s.a, { ttlMs: TTL, holder: 'holder-a' });
  s.leaseB = await client.acquire(s.b, { ttlMs: TTL, holder: 'holder-b' });
  s.permits = [await client.acquire(s.sem, { ttlMs: TTL, limit: 3 }), await client.acquire(s.sem, { ttlMs: TTL, limit: 3 })];
  s.leaseOutside = await client.acquire(s.outside, { ttlMs: TTL });
  s.waiting = other.acquire(s.a, { ttlMs: TTL, waitMs: 30_000, holder: 'waiter' });
  await eventually(async () => (await client.describe(s.a)).waiters === 1, 'the waiter queued');
  return s;
}

// `listed` is exactly the scene's names under the prefix, each as it is.
function check(s, listed) {
  const byName = new Map(listed.map((l) => [l.name, l]));
  assert.deepEqual([...byName.keys()].sort(), [s.a, s.b, s.sem]);
  assert.equal(listed.length, 3);
  for (const [lease, holder, waiters] of [[s.leaseA, 'holder-a', 1], [s.leaseB, 'holder-b', 0]]) {
    const l = byName.get(lease.name);
    assert.equal(l.held, true);
    assert.equal(l.holder, holder);
    assert.equal(typeof l.fence, 'bigint');
    assert.equal(l.fence, lease.fence);
    assert.equal(l.waiters, waiters);
    assert.equal(l.permitsHeld, 0);
    assert.equal(l.tenant, '@root');
    assert.ok(l.remainingMs > 0 && l.remainingMs <= TTL, String(l.remainingMs));
    assert.equal(l.ttlMs, TTL);
    assert.ok(Math.abs(l.grantedAtUnixMs - Date.now()) < 60_000);
    assert.equal(l.lockDelayRemainingMs, 0);
  }
  const sem = byName.get(s.sem);
  assert.equal(sem.held, false);
  assert.equal(sem.permitsHeld, 2);
  assert.equal(sem.waiters, 0);
}

async function tearDown(s) {
  await s.leaseA.release();
  const next = await s.waiting;
  assert.ok(next.fence > s.leaseA.fence);
  await next.release();
  for (const lease of [s.leaseB, s.leaseOutside, ...s.permits]) await lease.release();
}

describe('listing, against one broker', () => {
  let broker, client, other;
  before(async () => {
    broker = await startBroker();
    client = connect(broker.address);
    other = connect(broker.address);
  });
  after(async () => {
    await client?.close();
    await other?.close();
    await broker?.kill();
  });

  test('listPage and list show exactly the names under a prefix, with holder, fence, waiters and permits', async () => {
    const s = await scene(client, other, 'list');
    try {
      // One page of the default size holds them all (memory store: in name
      // order, and the walk is done).
      const page = await client.listPage({ prefix: s.prefix });
      assert.equal(page.nextPageToken, '');
      assert.deepEqual(page.locks.map((l) => l.name), [s.a, s.b, s.sem]);
      check(s, page.locks);

      check(s, await collect(client.list({ prefix: s.prefix })));

      // Pages of one name: the tokens lead over all of them.
      let pages = 0;
      let pageToken = '';
      const entries = [];
      for (;;) {
        const p = await client.listPage({ prefix: s.prefix, pageSize: 1, pageToken });
        pages += 1;
        assert.ok(p.locks.length <= 1);
        entries.push(...p.locks);
        if (!p.nextPageToken) break;
        pageToken = p.nextPageToken;
      }
      assert.ok(pages >= 3, String(pages));
      check(s, entries);
      check(s, await collect(client.list({ prefix: s.prefix, pageSize: 1 })));

      // The name outside the prefix is under its own.
      assert.deepEqual((await collect(client.list({ prefix: s.outside.replace(/c$/, '') }))).map((l) => l.name), [s.outside]);

      // Breaking out of the loop stops the walk.
      let seen = 0;
      for await (const l of client.list({ prefix: s.prefix, pageSize: 1 })) {
        assert.ok(l.name.startsWith(s.prefix));
        seen += 1;
        break;
      }
      assert.equal(seen, 1);
    } finally {
      await tearDown(s);
    }
    // Free names are left out.
    assert.deepEqual(await collect(client.list({ prefix: s.prefix })), []);
  });

  test('a page size above the maximum is a BAD_ARGUMENT naming page_size', async () => {
    const refused = (err) => {
      assert.ok(err instanceof LeaseholdError, String(err));
      assert.equal(err.code, status.INVALID_ARGUMENT);
      assert.equal(err.reason, 'BAD_ARGUMENT');
      assert.equal(err.metadata.argument, 'page_size');
      assert.equal(err.metadata.max_page_size, '1000');
      assert.match(err.message, /^pageSize=5000: /);
      return true;
    };
    await assert.rejects(client.listPage({ prefix: 'node-test/', pageSize: 5000 }), refused);
    // The walk rejects at its first step.
    await assert.rejects(collect(client.list({ pageSize: 5000 })), refused);
    // A bad prefix names the prefix.
    await assert.rejects(client.listPage({ prefix: 'bad name with spaces' }), (err) => {
      assert.equal(err.reason, 'BAD_ARGUMENT');
      assert.equal(err.metadata.argument, 'prefix');
      assert.match(err.message, /^prefix="bad name with spaces": /);
      return true;
    });
    // Caught here: a page size no request can carry.
    await assert.rejects(client.listPage({ pageSize: -1 }), /pageSize must be a non-negative integer/);
  });
});

test('an admin lists every tenant\'s names (--auth-file); a use-only credential only its own', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-node-list-'));
  const tokens = { payments: randomBytes(18).toString('base64url'), search: randomBytes(18).toString('base64url'), ops: randomBytes(18).toString('base64url') };
  const sha = (s) => createHash('sha256').update(s).digest('hex');
  writeFileSync(join(dir, 'auth'),
    `payments use token:sha256:${sha(tokens.payments)}\n` +
    `search use token:sha256:${sha(tokens.search)}\n` +
    `ops use,admin token:sha256:${sha(tokens.ops)}\n`);
  const broker = await startBroker(['--auth-file', join(dir, 'auth')]);
  const payments = connect(broker.address, { token: tokens.payments });
  const search = connect(broker.address, { token: tokens.search });
  const ops = connect(broker.address, { token: tokens.ops });
  try {
    const prefix = `${lockName('tenants')}/`;
    const name = `${prefix}ledger`;
    const mine = await payments.acquire(name, { ttlMs: TTL, holder: 'payments-job' });
    const theirs = await search.acquire(name, { ttlMs: TTL, holder: 'search-job' });

    // Every tenant's: the same name twice, told apart by tenant.
    const every = (await collect(ops.list({ prefix, tenant: '*' }))).sort((x, y) => x.tenant.localeCompare(y.tenant));
    assert.deepEqual(every.map((l) => [l.tenant, l.name, l.holder, l.fence]), [
      ['payments', name, 'payments-job', mine.fence],
      ['search', name, 'search-job', theirs.fence],
    ]);
    assert.deepEqual((await collect(ops.list({ prefix, tenant: '*', pageSize: 1 }))).map((l) => l.tenant).sort(), ['payments', 'search']);
    // One tenant's, by an admin; the caller's own, by anyone.
    assert.deepEqual((await collect(ops.list({ prefix, tenant: 'payments' }))).map((l) => l.holder), ['payments-job']);
    assert.deepEqual((await collect(search.list({ prefix }))).map((l) => [l.tenant, l.holder]), [['search', 'search-job']]);
    assert.deepEqual(await collect(ops.list({ prefix })), []); // the admin's own namespace

    for (const tenant of ['*', 'payments']) {
      await assert.rejects(search.listPage({ prefix, tenant }), (err) => {
        assert.equal(err.code, status.PERMISSION_DENIED, String(err));
        return true;
      });
    }
    await mine.release();
    await theirs.release();
  } finally {
    await payments.close();
    await search.close();
    await ops.close();
    await broker.kill();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a walk on a Redis store covers every name (kept once per tenant and name)', async (t) => {
  if (!haveRedis()) return t.skip('no redis-server on the PATH');
  const redis = await startRedis();
  const broker = await startBroker([], { store: redis.url });
  const client = connect(broker.address);
  try {
    const base = lockName('redis');
    const names = Array.from({ length: 12 }, (_, i) => `${base}/${String(i).padStart(2, '0')}`);
    const leases = [];
    for (const name of names) leases.push(await client.acquire(name, { ttlMs: TTL, holder: 'r' }));
    for (const pageSize of [1, 5, 0]) {
      // In SCAN's order, and a name may come twice: keep one per (tenant, name).
      const seen = new Map();
      for await (const l of client.list({ prefix: `${base}/`, pageSize })) seen.set(`${l.tenant}\0${l.name}`, l);
      assert.deepEqual([...seen.values()].map((l) => l.name).sort(), names);
      for (const lease of leases) assert.equal(seen.get(`@root\0${lease.name}`).fence, lease.fence);
    }
    for (const lease of leases) await lease.release();
  } finally {
    await client.close();
    await broker.kill();
    await redis.kill();
  }
});
