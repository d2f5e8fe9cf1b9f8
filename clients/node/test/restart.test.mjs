// A waiting acquire across a broker's graceful restart: two brokers on one
// redis-server, the waiter's broker sent SIGTERM. The broker ends the wait with
// UNAVAILABLE "shutting down" and keeps the place in line (leasehold-place);
// the client takes it to the next broker address, as it does with the place an
// expired wait kept: the application sees no error, and nobody who queued
// later overtakes it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, NotAcquired } from '@leasehold/client';
import { eventually, haveRedis, lockName, startBroker, startRedis } from './helpers.mjs';

// Two brokers on one redis-server, and clients closed (their waits ended)
// and processes stopped however the test ends.
async function twoBrokers(t, run) {
  if (!haveRedis()) return t.skip('no redis-server on the PATH');
  const redis = await startRedis();
  const a = await startBroker([], { store: redis.url });
  const b = await startBroker([], { store: redis.url });
  const clients = [];
  const client = (target) => { const c = connect(target, { logger: null }); clients.push(c); return c; };
  try {
    await run({ a, b, client });
  } finally {
    await Promise.allSettled(clients.map((c) => c.close()));
    await a.kill();
    await b.kill();
    await redis.kill();
  }
}

// [callers in line on every broker, callers waiting on the one `watcher` talks to].
async function line(watcher, name) {
  const d = await watcher.describe(name);
  return [d.waiters, d.localWaiters];
}

// Settles with whether `promise` settled, and how, without throwing.
function track(promise) {
  const state = { done: false, error: null };
  promise.then(() => { state.done = true; }, (err) => { state.done = true; state.error = err; });
  return state;
}

test('an endless wait keeps its place across its broker\'s graceful restart: served first, through the other broker, with no error', async (t) => {
  await twoBrokers(t, async ({ a, b, client }) => {
    const name = lockName('restart');
    const watcher = client(b.address);
    const waiter = client([a.address, b.address]);
    const later = client(b.address);
    const holder = await watcher.acquire(name, { ttlMs: 30_000, holder: 'holder' });
    const first = waiter.acquire(name, { ttlMs: 10_000, waitMs: null, holder: 'first' });
    const firstState = track(first);
    await eventually(async () => String(await line(watcher, name)) === '1,0', 'the first waiter queued on the first broker');
    const second = later.acquire(name, { ttlMs: 10_000, waitMs: null, holder: 'second' });
    const secondState = track(second);
    await eventually(async () => String(await line(watcher, name)) === '2,1', 'the second waiter queued behind it');

    await a.terminate();
    // The first waiter now waits on the second broker too, in the place it
    // kept: still two in line, both waiting there.
    await eventually(async () => firstState.done || String(await line(watcher, name)) === '2,2', 'the first waiter moved to the second broker');
    assert.equal(firstState.error, null, `the wait failed: ${firstState.error}`);
    assert.equal(firstState.done, false);
    assert.equal(waiter.target, b.address);

    await holder.release();
    const [winner, lease] = await Promise.race([first.then((l) => ['first', l]), second.then((l) => ['second', l])]);
    assert.equal(winner, 'first', 'the caller that queued later was served first');
    assert.equal((await watcher.describe(name)).holder, 'first');
    assert.equal(secondState.done, false);
    assert.ok(lease.fence > holder.fence);
    await lease.release();
    const next = await second;
    assert.ok(next.fence > lease.fence);
    await next.release();
  });
});

test('a finite wait across its broker\'s graceful restart goes on through the other broker and ends at its deadline with NotAcquired', async (t) => {
  await twoBrokers(t, async ({ a, b, client }) => {
    const name = lockName('restart-finite');
    const watcher = client(b.address);
    const waiter = client([a.address, b.address]);
    const holder = await watcher.acquire(name, { ttlMs: 30_000, holder: 'holder' });
    const waitMs = 6000;
    const started = performance.now();
    const waiting = waiter.acquire(name, { ttlMs: 10_000, waitMs, holder: 'finite' });
    const state = track(waiting);
    await eventually(async () => String(await line(watcher, name)) === '1,0', 'the waiter queued on the first broker');
    await a.terminate();
    await assert.rejects(waiting, NotAcquired);
    const elapsed = performance.now() - started;
    assert.ok(elapsed >= waitMs - 200 && elapsed <= waitMs + 5000, `ended after ${elapsed} ms`);
    assert.ok(state.done);
    assert.equal(waiter.target, b.address);
    // It left the line when it gave up.
    await eventually(async () => String(await line(watcher, name)) === '0,0', 'the caller left the line');
    await holder.release();
  });
});

test('an endless wait aborted after moving to the other broker leaves no place behind', async (t) => {
  await twoBrokers(t, async ({ a, b, client }) => {
    const name = lockName('restart-abort');
    const watcher = client(b.address);
    const waiter = client([a.address, b.address]);
    const holder = await watcher.acquire(name, { ttlMs: 30_000, holder: 'holder' });
    const abort = new AbortController();
    const waiting = waiter.acquire(name, { ttlMs: 10_000, waitMs: null, signal: abort.signal });
    const state = track(waiting);
    await eventually(async () => String(await line(watcher, name)) === '1,0', 'the waiter queued on the first broker');
    await a.terminate();
    await eventually(async () => state.done || String(await line(watcher, name)) === '1,1', 'the waiter moved to the second broker');
    assert.equal(state.done, false, `the wait failed: ${state.error}`);
    abort.abort(new Error('no longer needed'));
    await assert.rejects(waiting, /no longer needed/);
    // At once, not when a kept place would lapse (3 s).
    await eventually(async () => String(await line(watcher, name)) === '0,0', 'the place was given up', 2000);
    await holder.release();
  });
});

test('leases on the Session stream outlive their broker\'s graceful restart: renewed through the other broker, no loss, no error', async (t) => {
  await twoBrokers(t, async ({ a, b, client }) => {
    const sessions = async (broker) => Number(/^leasehold_session_streams (\d+)$/m.exec(await broker.metrics())[1]);
    const holder = client([a.address, b.address]);
    const leases = await Promise.all([2000, 5000].map((ttlMs) => holder.acquire(lockName('restart-held'), { ttlMs })));
    const lost = [];
    for (const lease of leases) lease.onLost((reason) => lost.push(reason));
    assert.equal(await sessions(a), 1);
    await a.terminate();
    await eventually(() => holder.target === b.address, 'the client moved to the second broker');
    const moved = leases.map((l) => l.deadline);
    await eventually(() => leases.every((l, i) => l.deadline > moved[i]), 'both leases renewed through the second broker');
    assert.equal(await sessions(b), 1);
    // A grant on the new stream, while the others are kept alive there.
    const more = await holder.acquire(lockName('restart-more'), { ttlMs: 2000 });
    await more.release();
    assert.deepEqual(lost, []);
    for (const lease of leases) await lease.release();
  });
});
