// The Session stream (the default): Acquire, Release and heartbeats on one
// bidi stream per client, against a real broker (helpers.mjs). What each way
// of failing does is listed in src/session.ts; each has a test here or in
// failover.test.mjs and restart.test.mjs (which run on the Session stream too).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, LeaseholdError, LeaseLost, NotAcquired, status } from '@leasehold/client';
import { eventually, lockName, olderBroker, startBroker } from './helpers.mjs';

// A client whose debug log is kept: `opened()` counts the Session streams it opened.
function logged(target, options = {}) {
  const lines = [];
  const log = (m) => { lines.push(m); if (process.env.LEASEHOLD_TEST_LOG) console.log(m); };
  const client = connect(target, { logger: { warn: log, debug: log }, ...options });
  return { client, lines, opened: () => lines.filter((l) => /^Session stream to \S+ opened$/.test(l)).length };
}

async function gauge(broker, name) {
  const m = new RegExp(`^${name} (\\d+)$`, 'm').exec(await broker.metrics());
  assert.ok(m, `the broker exports ${name}`);
  return Number(m[1]);
}

// Settles with whether `promise` settled, and how, without throwing.
function track(promise) {
  const state = { done: false, value: undefined, error: null };
  promise.then((v) => { state.done = true; state.value = v; }, (err) => { state.done = true; state.error = err; });
  return state;
}

describe('the Session stream', () => {
  let broker, watcher;
  before(async () => {
    broker = await startBroker(['--enable-revoke']);
    watcher = connect(broker.address, { logger: null, session: false });
  });
  after(async () => {
    await watcher?.close();
    await broker?.kill();
  });

  test('used by default: one stream carries the grants and the heartbeats (no KeepAlive stream), half-closed once idle', async () => {
    const { client, opened } = logged(broker.address);
    try {
      await eventually(async () => (await gauge(broker, 'leasehold_session_streams')) === 0, 'no Session stream open before');
      const lease = await client.acquire(lockName('default'), { ttlMs: 600 });
      const first = lease.deadline;
      await eventually(() => lease.deadline > first + 400, 'renewed by several heartbeats');
      assert.equal(await gauge(broker, 'leasehold_session_streams'), 1);
      assert.equal(await gauge(broker, 'leasehold_keepalive_streams'), 0);
      assert.equal(opened(), 1);
      await lease.release();
      await eventually(async () => (await gauge(broker, 'leasehold_session_streams')) === 0, 'the stream ended once idle');
      assert.equal(lease.lostReason, null);
    } finally {
      await client.close();
    }
  });

  test('a caller that takes and gives back a lease now and then keeps its one stream while it does', async () => {
    const { client, lines, opened } = logged(broker.address);
    try {
      for (let i = 0; i < 5; i++) {
        const lease = await client.acquire(lockName('now-and-then'), { ttlMs: 5000 });
        await lease.release();
        // Other work between two leases: timers and I/O run, the stream idles.
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(opened(), 1, `one stream for five leases taken apart: ${lines.join('\n')}`);
      await eventually(async () => (await gauge(broker, 'leasehold_session_streams')) === 0, 'the stream ended once idle');
    } finally {
      await client.close();
    }
  });

  test('concurrency: sixty acquires and releases at once over the one stream, answered out of order; a wait holds up nothing', async () => {
    const { client, lines, opened } = logged(broker.address);
    try {
      // A waiting acquire first: the requests behind it are answered meanwhile.
      const blocked = lockName('blocked');
      const holder = await watcher.acquire(blocked, { ttlMs: 30_000 });
      const waiting = client.acquire(blocked, { ttlMs: 5000, waitMs: 30_000 });
      const waitState = track(waiting);
      await eventually(async () => (await watcher.describe(blocked)).waiters === 1, 'the waiter queued');
      const leases = await Promise.all(Array.from({ length: 60 }, (_, i) => client.acquire(lockName(`many-${i}`), { ttlMs: 5000 })));
      assert.equal(new Set(leases.map((l) => l.ownerToken)).size, 60);
      assert.equal(waitState.done, false, 'the wait still waits');
      // One lock, ten callers of the same client waiting for it on the one stream: one holder at a time.
      const one = lockName('one-at-a-time');
      let inside = 0;
      const fences = [];
      await Promise.all(Array.from({ length: 10 }, async () => {
        const lease = await client.acquire(one, { ttlMs: 5000, waitMs: 30_000 });
        inside += 1;
        assert.equal(inside, 1, 'two holders at once');
        fences.push(lease.fence);
        await new Promise((r) => setImmediate(r));
        inside -= 1;
        await lease.release();
      }));
      assert.equal(fences.length, 10);
      await Promise.all(leases.map((l) => l.release()));
      for (const l of leases) assert.equal((await watcher.checkFence(l.name, l.fence)).current, false);
      await holder.release();
      const granted = await waiting;
      await granted.release();
      assert.equal(opened(), 1, `one stream for all of it: ${lines.join('\n')}`);
    } finally {
      await client.close();
    }
  });

  test('an aborted wait sends cancel: its place is given up at once and the caller behind it gets the lock', async () => {
    const name = lockName('abort-place');
    const holder = await watcher.acquire(name, { ttlMs: 30_000, holder: 'holder' });
    const a = connect(broker.address, { logger: null });
    const b = connect(broker.address, { logger: null });
    try {
      // An endless wait (keep_place on every call) first in line, a finite one behind it.
      const controller = new AbortController();
      const first = a.acquire(name, { ttlMs: 5000, waitMs: null, signal: controller.signal, holder: 'first' });
      await eventually(async () => (await watcher.describe(name)).waiters === 1, 'the first waiter queued');
      const second = b.acquire(name, { ttlMs: 5000, waitMs: 30_000, holder: 'second' });
      await eventually(async () => (await watcher.describe(name)).waiters === 2, 'the second waiter queued');
      controller.abort(new Error('no longer needed'));
      await assert.rejects(first, /no longer needed/);
      // Given up at once, not left to lapse (a kept place stays 3 s).
      await eventually(async () => (await watcher.describe(name)).waiters === 1, 'the first waiter left the line', 2000);
      const releasedAt = performance.now();
      await holder.release();
      const lease = await second;
      assert.ok(performance.now() - releasedAt < 2000, 'granted at the release, not when a place lapsed');
      assert.equal((await watcher.describe(name)).holder, 'second');
      await lease.release();
    } finally {
      await a.close();
      await b.close();
    }
  });

  test('a deadline on a wait (AbortSignal.timeout) gives up the place; a client deadline past a silent broker fails DEADLINE_EXCEEDED and a new stream follows', async () => {
    const name = lockName('deadline');
    const holder = await watcher.acquire(name, { ttlMs: 30_000 });
    const { client, lines, opened } = logged(broker.address, { timeoutMs: 1500 });
    try {
      await assert.rejects(client.acquire(name, { waitMs: 60_000, signal: AbortSignal.timeout(300) }), (err) => err.name === 'TimeoutError');
      await eventually(async () => (await watcher.describe(name)).waiters === 0, 'the waiter left the line', 2000);
      await holder.release();

      // The broker answers nothing (stopped): the request's own deadline ends it.
      const kept = await client.acquire(lockName('kept'), { ttlMs: 10_000 });
      const other = lockName('silent');
      const streams = opened();
      await broker.pause();
      let started;
      try {
        started = performance.now();
        await assert.rejects(client.acquire(other, { ttlMs: 5000 }), (err) => {
          assert.ok(err instanceof LeaseholdError, String(err));
          assert.equal(err.code, status.DEADLINE_EXCEEDED, err.message);
          return true;
        });
      } finally {
        broker.resume();
      }
      const took = performance.now() - started;
      assert.ok(took >= 1400 && took < 6000, `failed after ${took.toFixed(0)} ms`);
      assert.ok(lines.some((l) => /Session stream to \S+ reset: .*answered nothing/.test(l)), `the silent stream was reset: ${lines.join('\n')}`);
      // The broker is back: a new stream. (Waiting: the request that timed out may
      // have been granted as the broker woke up, and released at once.)
      const lease = await client.acquire(other, { ttlMs: 5000, waitMs: 5000 });
      assert.equal(opened(), streams + 1, 'one new stream');
      const before = kept.deadline;
      await eventually(() => kept.deadline > before, 'the held lease is renewed on the new stream');
      assert.equal(kept.lostReason, null);
      await lease.release();
      await kept.release();
    } finally {
      await client.close();
    }
  });

  test('the errors are those of the unary calls: same classes, codes and messages, and lost leases on release', async () => {
    const held = lockName('held');
    const holderLease = await watcher.acquire(held, { ttlMs: 30_000, holder: 'the-holder' });
    const free = lockName('free');
    const cases = [
      ['held', (c) => c.acquire(held, { ttlMs: 5000 })],
      ['held, waited', (c) => c.acquire(held, { ttlMs: 5000, waitMs: 100 })],
      ['ttl too short', (c) => c.acquire(lockName('bad'), { ttlMs: 1 })],
      ['bad name', (c) => c.acquire('no spaces allowed', { ttlMs: 5000 })],
      ['ttl too long', (c) => c.acquire(lockName('bad'), { ttlMs: 86_400_000 })],
      ['lock-delay too long', (c) => c.acquire(lockName('bad'), { ttlMs: 5000, lockDelayMs: 86_400_000 })],
      ['stranger\'s token', (c) => c.releaseToken(held, '0123456789abcdef0123456789abcdef')],
      ['free name', (c) => c.releaseToken(free, '0123456789abcdef0123456789abcdef')],
      ['released twice by token', async (c) => {
        const l = await c.acquire(lockName('twice'), { ttlMs: 5000 });
        await c.releaseToken(l.name, l.ownerToken);
        await c.releaseToken(l.name, l.ownerToken); // idempotent within 10 s
        return 'ok';
      }],
    ];
    const outcome = async (c, run) => {
      try {
        return await run(c);
      } catch (err) {
        return { class: err.constructor.name, code: err.code, reason: err.reason, message: err.message.replace(/\d+/g, 'N') };
      }
    };
    const session = connect(broker.address, { logger: null });
    const unary = connect(broker.address, { logger: null, session: false });
    try {
      for (const [what, run] of cases) {
        const [s, u] = [await outcome(session, run), await outcome(unary, run)];
        assert.deepEqual(s, u, what);
      }
      assert.equal((await outcome(session, cases[0][1])).class, 'NotAcquired');
      assert.match((await outcome(session, cases[0][1])).message, /the-holder/);
      assert.equal((await outcome(session, cases[6][1])).reason, 'NOT_OWNER');
      assert.equal((await outcome(session, cases[7][1])).code, status.NOT_FOUND);
      // A lease revoked while held: its release says so, the same way.
      for (const c of [session, unary]) {
        const l = await c.acquire(lockName('revoked'), { ttlMs: 5000 });
        await watcher.revoke(l.name);
        await eventually(() => l.lostReason !== null, 'the loss is heard');
        await assert.rejects(l.release(), (err) => err instanceof LeaseLost && err.reason === 'REVOKED');
      }
    } finally {
      await session.close();
      await unary.close();
      await holderLease.release();
    }
  });
});

test('an older broker (Session UNIMPLEMENTED): unary calls and a KeepAlive stream, asked once, with the same errors and cancellation', async () => {
  const broker = await startBroker();
  const older = await olderBroker(broker.address);
  const watcher = connect(broker.address, { logger: null, session: false });
  const { client, opened } = logged(older.address);
  try {
    const name = lockName('older');
    const lease = await client.acquire(name, { ttlMs: 600, holder: 'older-client' });
    assert.equal(older.sessionCalls(), 1, 'Session was asked for');
    const first = lease.deadline;
    await eventually(() => lease.deadline > first + 400, 'renewed by several heartbeats');
    // The heartbeats went on a KeepAlive stream (through the stand-in).
    assert.equal(await gauge(broker, 'leasehold_keepalive_streams'), 1);
    assert.equal(await gauge(broker, 'leasehold_session_streams'), 0);
    // Refusals as from a unary call.
    await assert.rejects(watcher.acquire(name, { ttlMs: 5000 }), (err) => err instanceof NotAcquired && /older-client/.test(err.details));
    const other = connect(older.address, { logger: null });
    try {
      await assert.rejects(other.acquire(name, { ttlMs: 5000 }), (err) => err instanceof NotAcquired && /older-client/.test(err.details));
      // A wait cancelled through the stand-in leaves the line.
      const controller = new AbortController();
      const waiting = other.acquire(name, { ttlMs: 5000, waitMs: 60_000, signal: controller.signal });
      await eventually(async () => (await watcher.describe(name)).waiters === 1, 'the waiter queued');
      controller.abort();
      await assert.rejects(waiting, (err) => err.name === 'AbortError');
      await eventually(async () => (await watcher.describe(name)).waiters === 0, 'the waiter left the line');
    } finally {
      await other.close();
    }
    await lease.release();
    const again = await client.acquire(name, { ttlMs: 5000 });
    await again.release();
    assert.equal(older.sessionCalls(), 2, 'each client asked once (the answer is remembered)');
    assert.equal(opened(), 1);
  } finally {
    await client.close();
    await watcher.close();
    older.close();
    await broker.kill();
  }
});

// A scripted broker for the one race a real broker cannot be made to show
// on demand: a grant that crosses its cancel ("answered CANCELLED, unless its
// own answer came first"). It answers each Acquire only when its cancel
// arrives, and with a grant; it records the releases it gets.
async function grantOnCancel() {
  const grpc = await import('@grpc/grpc-js');
  const protoLoader = await import('@grpc/proto-loader');
  const { PROTO_DIR } = await import('@leasehold/client');
  const definition = protoLoader.loadSync('leasehold/v1/leasehold.proto', { includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: String, defaults: true });
  const Service = grpc.loadPackageDefinition(definition).leasehold.v1.LeaseholdService;
  const released = [];
  const waiting = new Map(); // id -> acquire request
  let tokens = 0;
  const server = new grpc.Server();
  server.addService(Service.service, {
    Session(call) {
      call.on('error', () => {});
      call.on('end', () => call.end());
      call.on('data', (req) => {
        if (req.acquire) {
          waiting.set(req.id, req.acquire);
        } else if (req.cancel) {
          const acquire = waiting.get(req.cancel.id);
          waiting.delete(req.cancel.id);
          const owner_token = String(++tokens).padStart(32, '0');
          if (acquire) call.write({ id: req.cancel.id, acquire: { lease: { name: acquire.name, owner_token, fence: '7', ttl_ms: acquire.ttl_ms }, waited_ms: 0 } });
        } else if (req.release) {
          released.push(req.release.owner_token);
          call.write({ id: req.id, release: {} });
        }
      });
    },
  });
  const port = await new Promise((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
  return {
    address: `127.0.0.1:${port}`,
    queued: () => waiting.size,
    released,
    close: () => server.forceShutdown(),
  };
}

test('a grant that crosses its cancel (abort, close) is released by the client: nobody holds a lease its caller gave up', async () => {
  const fake = await grantOnCancel();
  const client = connect(fake.address, { logger: null });
  try {
    const controller = new AbortController();
    const aborted = client.acquire(lockName('crossed'), { ttlMs: 5000, waitMs: 60_000, signal: controller.signal });
    await eventually(() => fake.queued() === 1, 'the acquire reached the broker');
    controller.abort();
    await assert.rejects(aborted, (err) => err.name === 'AbortError');
    await eventually(() => fake.released.length === 1, 'the crossed grant was released');
    assert.deepEqual(fake.released, ['1'.padStart(32, '0')]);

    // close(): the wait is cancelled, the grant that answers the cancel is
    // released before the stream ends, then the call rejects.
    const closing = client.acquire(lockName('crossed-close'), { ttlMs: 5000, waitMs: 60_000 });
    await eventually(() => fake.queued() === 1, 'the acquire reached the broker');
    await client.close();
    await assert.rejects(closing, /the client is closed/);
    assert.deepEqual(fake.released, ['1', '2'].map((t) => t.padStart(32, '0')));
  } finally {
    await client.close();
    fake.close();
  }
});
