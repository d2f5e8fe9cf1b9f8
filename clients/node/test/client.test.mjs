// The client against a real broker: `leasehold serve --store memory` on a
// free loopback port (helpers.mjs). Imported by the package's own name, as
// users import it (the ES module entry point; pack.test.mjs covers require).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { inspect, promisify } from 'node:util';
import { connect, Lease, LeaseholdError, LeaseLost, NotAcquired, status } from '@leasehold/client';
import { MIN_TTL, eventually, lockName, sleep, startBroker } from './helpers.mjs';

describe('against one broker', () => {
  let broker, client;
  before(async () => {
    broker = await startBroker(['--enable-revoke']);
    client = connect(broker.address, { logger: process.env.LEASEHOLD_TEST_LOG ? { warn: console.log, debug: console.log } : null });
  });
  after(async () => {
    await client?.close();
    await broker?.kill();
  });

  test('acquire gives a fence, and a second acquire is refused with NotAcquired (ABORTED) naming the holder', async () => {
    const name = lockName('exclusive');
    const lease = await client.acquire(name, { ttlMs: 5000, holder: 'first' });
    assert.ok(lease instanceof Lease);
    assert.equal(typeof lease.fence, 'bigint');
    assert.ok(lease.fence > 0n);
    assert.equal(lease.name, name);
    assert.equal(lease.ttlMs, 5000);
    assert.ok(lease.deadline > performance.now(), 'deadline is in the future');
    assert.ok(lease.deadline <= performance.now() + 5000 - 500, 'deadline is at most TTL - margin away');

    const other = connect(broker.address, { logger: null });
    try {
      await assert.rejects(other.acquire(name, { ttlMs: 5000, holder: 'second' }), (err) => {
        assert.ok(err instanceof NotAcquired, String(err));
        assert.ok(err instanceof LeaseholdError);
        assert.equal(err.code, status.ABORTED);
        assert.match(err.details, /first/); // names the holder
        return true;
      });
    } finally {
      await other.close();
    }
    // The owner token is never printed in full.
    assert.equal(lease.ownerToken.length, 32);
    const shown = inspect(lease) + JSON.stringify(lease) + String(lease);
    assert.ok(!shown.includes(lease.ownerToken), `token leaked in ${shown}`);
    await lease.release();
  });

  test('fences strictly increase across acquire/release cycles', async () => {
    const name = lockName('fences');
    let previous = 0n;
    for (let i = 0; i < 4; i++) {
      const lease = await client.acquire(name, { ttlMs: 2000 });
      assert.ok(lease.fence > previous, `fence ${lease.fence} after ${previous}`);
      previous = lease.fence;
      await lease.release();
    }
  });

  test('contention: four clients waiting for one lock never overlap, and fences rise in grant order', async () => {
    const name = lockName('contended');
    const clients = Array.from({ length: 4 }, () => connect(broker.address, { logger: null }));
    let inside = 0;
    const fences = [];
    try {
      await Promise.all(clients.map(async (c, i) => {
        for (let round = 0; round < 3; round++) {
          const lease = await c.acquire(name, { ttlMs: 5000, waitMs: 30_000, holder: `worker-${i}` });
          inside += 1;
          assert.equal(inside, 1, 'two holders at once');
          fences.push(lease.fence);
          await sleep(10); // hold it across a turn of the event loop, so the others are queued
          lease.check();
          inside -= 1;
          await lease.release();
        }
      }));
    } finally {
      await Promise.all(clients.map((c) => c.close()));
    }
    assert.equal(fences.length, 12);
    for (let i = 1; i < fences.length; i++) assert.ok(fences[i] > fences[i - 1], `fence ${fences[i]} after ${fences[i - 1]}`);
  });

  test('a kept-alive lease outlives several TTLs with the same fence', async () => {
    const name = lockName('keepalive');
    const lease = await client.acquire(name, { ttlMs: MIN_TTL });
    const firstDeadline = lease.deadline;
    await sleep(MIN_TTL * 5); // the time passing is what is tested
    assert.equal(lease.lostReason, null);
    assert.equal(lease.isLost(), false);
    lease.check();
    assert.ok(lease.deadline > firstDeadline + MIN_TTL * 3, 'the local deadline moved forward');
    const d = await client.describe(name);
    assert.equal(d.held, true);
    assert.equal(d.fence, lease.fence);
    // A hair over the TTL is possible: the memory store's Describe reads its
    // clock before a concurrent renewal that reads a later one, then rounds up.
    assert.ok(d.remainingMs > 0 && d.remainingMs <= MIN_TTL + 50, `remaining ${d.remainingMs} ms`);
    assert.deepEqual(await client.checkFence(name, lease.fence), { current: true, currentFence: lease.fence });
    await lease.release();
  });

  // The broker's gauges of open Session and KeepAlive streams.
  const gauges = async () => {
    const text = await broker.metrics();
    const gauge = (name) => {
      const m = new RegExp(`^${name} (\\d+)$`, 'm').exec(text);
      assert.ok(m, `the broker exports ${name}`);
      return Number(m[1]);
    };
    return { session: gauge('leasehold_session_streams'), keepalive: gauge('leasehold_keepalive_streams') };
  };

  for (const [mode, options, kind] of [['a Session stream (the default)', {}, 'session'], ['a KeepAlive stream (session: false)', { session: false }, 'keepalive']]) {
    test(`one stream per client, whatever its number of leases, ended once none is left: ${mode}`, async () => {
      const own = connect(broker.address, { logger: null, ...options });
      try {
        // The other tests' clients end theirs once idle (at their next heartbeat time for KeepAlive).
        await eventually(async () => { const g = await gauges(); return g.session === 0 && g.keepalive === 0; }, 'no stream open before');
        const leases = [];
        for (const ttlMs of [MIN_TTL, 2000, 5000]) leases.push(await own.acquire(lockName('one-stream'), { ttlMs }));
        const deadlines = leases.map((l) => l.deadline);
        await eventually(() => leases.every((l, i) => l.deadline > deadlines[i]), 'every lease renewed');
        const open = await gauges();
        assert.deepEqual(open, { session: kind === 'session' ? 1 : 0, keepalive: kind === 'keepalive' ? 1 : 0 });
        for (const lease of leases) await lease.release();
        await eventually(async () => (await gauges())[kind] === 0, 'the stream ended after the last release');
      } finally {
        await own.close();
      }
    });
  }

  test('release frees the lock: checkFence turns false, the signal aborts, lost stays pending, a second release does nothing', async () => {
    const name = lockName('release');
    const lease = await client.acquire(name, { ttlMs: 5000, holder: 'releaser' });
    let lostCalls = 0;
    lease.onLost(() => lostCalls++);
    const held = await client.describe(name);
    assert.equal(held.held, true);
    assert.equal(held.holder, 'releaser');
    assert.equal((await client.checkFence(name, lease.fence)).current, true);

    await lease.release();
    await lease.release();
    assert.equal(lease.released, true);
    assert.equal(lease.lostReason, null);
    assert.equal(lease.signal.aborted, true);
    assert.throws(() => lease.check(), (err) => err instanceof LeaseLost && err.reason === 'RELEASED');
    assert.equal((await client.describe(name)).held, false);
    assert.deepEqual(await client.checkFence(name, lease.fence), { current: false, currentFence: 0n });
    // Free at once, and granted with a higher fence.
    const next = await client.acquire(name, { ttlMs: 5000 });
    assert.ok(next.fence > lease.fence);
    await next.release();
    assert.equal(await Promise.race([lease.lost, sleep(50).then(() => 'pending')]), 'pending');
    assert.equal(lostCalls, 0, 'a release is not a loss');
  });

  test('an AbortSignal cancels a wait: the waiter leaves the queue at once', async () => {
    const name = lockName('abort');
    const lease = await client.acquire(name, { ttlMs: 5000, holder: 'holder' });
    const waiter = connect(broker.address, { logger: null });
    try {
      const controller = new AbortController();
      const waiting = waiter.acquire(name, { ttlMs: 5000, waitMs: 60_000, signal: controller.signal });
      await eventually(async () => (await client.describe(name)).waiters === 1, 'the waiter is queued');
      const abortedAt = performance.now();
      controller.abort();
      await assert.rejects(waiting, (err) => err.name === 'AbortError');
      assert.ok(performance.now() - abortedAt < 2000, 'rejected at once, not at the end of the wait');
      await eventually(async () => (await client.describe(name)).waiters === 0, 'the waiter left the queue');
      // Nobody queued: after the release, a try (which never jumps a queue) gets it.
      await lease.release();
      const next = await waiter.acquire(name, { ttlMs: 5000 });
      assert.ok(next.fence > lease.fence);
      await next.release();

      // A signal aborted already: no call at all, the reason as given.
      const reason = new Error('shutting down');
      await assert.rejects(waiter.acquire(name, { signal: AbortSignal.abort(reason) }), (err) => err === reason);
      // A timeout signal ends a wait the same way.
      const again = await client.acquire(name, { ttlMs: 5000 });
      await assert.rejects(waiter.acquire(name, { waitMs: 60_000, signal: AbortSignal.timeout(300) }), (err) => err.name === 'TimeoutError');
      await again.release();
    } finally {
      await waiter.close();
    }
  });

  test('a revoked lease is lost: callbacks, signal and promise report REVOKED well before the local deadline', async () => {
    const name = lockName('revoked');
    const lease = await client.acquire(name, { ttlMs: 5000 });
    const fired = new Promise((resolve) => lease.onLost((reason, which) => resolve({ reason, which, at: performance.now() })));
    const deadline = lease.deadline;
    const revokedFence = await client.revoke(name);
    assert.equal(revokedFence, lease.fence);
    const { reason, which, at } = await fired;
    assert.equal(reason, 'REVOKED');
    assert.equal(which, lease);
    assert.ok(at < deadline, `lost at ${at.toFixed(0)}, deadline ${deadline.toFixed(0)}: told by the broker, not by the timer`);
    assert.equal(await lease.lost, 'REVOKED');
    assert.equal(lease.lostReason, 'REVOKED');
    assert.equal(lease.signal.aborted, true);
    assert.ok(lease.signal.reason instanceof LeaseLost && lease.signal.reason.reason === 'REVOKED');
    assert.throws(() => lease.check(), (err) => err instanceof LeaseLost && err.reason === 'REVOKED');
    await assert.rejects(lease.release(), (err) => err instanceof LeaseLost && err.reason === 'REVOKED');
    // A callback added after the loss runs too (asynchronously).
    assert.equal(await new Promise((resolve) => lease.onLost(resolve)), 'REVOKED');
    // The next grant has a higher fence.
    const next = await client.acquire(name, { ttlMs: 5000 });
    assert.ok(next.fence > lease.fence);
    await next.release();
  });

  test('semaphores: limit permits at once, each with its own fence', async () => {
    const name = lockName('semaphore');
    const a = await client.acquire(name, { ttlMs: 5000, limit: 2 });
    const b = await client.acquire(name, { ttlMs: 5000, limit: 2 });
    assert.ok(b.fence > a.fence);
    await assert.rejects(client.acquire(name, { ttlMs: 5000, limit: 2 }), NotAcquired);
    assert.equal((await client.describe(name)).permitsHeld, 2);
    await a.release();
    await b.release();
  });

  test('elections: campaign, leader and observe see the leader and its resignation', async () => {
    const election = lockName('election');
    const observation = await client.observe(election);
    const seen = observation[Symbol.asyncIterator]();
    assert.equal((await seen.next()).value, null, 'no leader at first');
    const leadership = await client.campaign(election, 'node-a', { ttlMs: 5000 });
    const leader = (await seen.next()).value;
    assert.deepEqual({ value: leader.value, term: leader.term }, { value: 'node-a', term: leadership.fence });
    assert.equal((await client.leader(election)).term, leadership.fence);
    await leadership.release(); // resign
    assert.equal((await seen.next()).value, null, 'no leader after the resignation');
    observation.cancel();
    assert.equal((await seen.next()).done, true);
    assert.equal(await client.leader(election), null);
  });

  test('close() while an acquire waits: the wait ends, the lease is not kept, the lock is free', async () => {
    const name = lockName('close-waiting');
    const lease = await client.acquire(name, { ttlMs: 5000 });
    const closing = connect(broker.address, { logger: null });
    const waiting = closing.acquire(name, { ttlMs: 5000, waitMs: 60_000 });
    await eventually(async () => (await client.describe(name)).waiters === 1, 'the waiter is queued');
    const closedAt = performance.now();
    await closing.close();
    await assert.rejects(waiting, (err) => err instanceof LeaseholdError && /the client is closed/.test(err.message));
    assert.ok(performance.now() - closedAt < 5000, 'the wait ended with the close, not at its end');
    await eventually(async () => (await client.describe(name)).waiters === 0, 'the waiter left the queue');
    await lease.release();
    assert.equal((await client.describe(name)).held, false);
    await assert.rejects(closing.acquire(name), /the client is closed/);
  });

  test('bad input: a clear error with the gRPC code, the reason and the broker\'s message after the option; bad options fail before any call', async () => {
    await assert.rejects(client.acquire(lockName('bad'), { ttlMs: 1 }), (err) => {
      assert.equal(err.code, status.INVALID_ARGUMENT);
      assert.equal(err.reason, 'BAD_ARGUMENT');
      assert.equal(err.message, `ttlMs=1: ${err.details}`);
      return true;
    });
    await assert.rejects(client.acquire('no spaces allowed', { ttlMs: 5000 }), (err) => err.code === status.INVALID_ARGUMENT);
    await assert.rejects(client.acquire(lockName('bad'), { ttlMs: -5 }), /ttlMs must be a non-negative number/);
    const unmargined = lockName('bad-margin');
    await assert.rejects(client.acquire(unmargined, { ttlMs: 5000, marginMs: NaN }), /marginMs must be/);
    assert.equal((await client.describe(unmargined)).held, false, 'nothing was granted');
    assert.throws(() => connect(broker.address, { cert: 'x.pem' }), /cert and key go together/);
    assert.throws(() => connect(['http://a:1', 'https://b:2']), /mix http/);
    assert.throws(() => connect(broker.address, { token: 'has space' }), (err) => /visible ASCII/.test(err.message) && !err.message.includes('has space'));
  });
});

test('killing the broker: the lost callback fires at the local deadline, before the broker could have expired the lease', async () => {
  const broker = await startBroker();
  const client = connect(broker.address, { logger: process.env.LEASEHOLD_TEST_LOG ? { warn: console.log, debug: console.log } : null });
  try {
    const ttlMs = 2000;
    const marginMs = 600;
    const lease = await client.acquire(lockName('killed'), { ttlMs, marginMs });
    const first = lease.deadline;
    await eventually(() => lease.deadline > first, 'a renewal was confirmed'); // the kill lands on a live stream
    const fired = new Promise((resolve) => lease.onLost((reason) => resolve({ reason, at: performance.now() })));
    await broker.kill();
    // No renewal can be confirmed from here on: this is the deadline that
    // counts, sent + TTL - margin, where sent + TTL is the earliest moment
    // the broker could have expired the lease.
    const deadline = lease.deadline;
    const { reason, at } = await fired;
    assert.equal(reason, 'DEADLINE_PASSED');
    assert.ok(at >= deadline, `lost ${(deadline - at).toFixed(0)} ms before the deadline`);
    assert.ok(at < deadline + marginMs, `lost ${(at - deadline).toFixed(0)} ms after the deadline: past the broker's expiry`);
    assert.equal(lease.lostReason, 'DEADLINE_PASSED');
    await assert.rejects(lease.release(), (err) => err instanceof LeaseLost && err.reason === 'DEADLINE_PASSED');
  } finally {
    await client.close();
    await broker.kill();
  }
});

test('example.mjs takes the lock, writes with its fence and releases it', async () => {
  const broker = await startBroker();
  try {
    const example = fileURLToPath(new URL('../example.mjs', import.meta.url));
    const { stdout } = await promisify(execFile)(process.execPath, [example, broker.address, lockName('example')]);
    const fence = /acquired \S+ with fence (\d+)/.exec(stdout)?.[1];
    assert.ok(fence, stdout);
    assert.equal(stdout.match(new RegExp(`wrote row\\d=value\\d with fence ${fence}`, 'g'))?.length, 3, stdout);
    assert.match(stdout, /released /);
  } finally {
    await broker.kill();
  }
});
