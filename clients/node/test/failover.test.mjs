// Several broker replicas sharing one store (a real redis-server): calls and
// the KeepAlive stream move to the next replica when one cannot be reached,
// and the leases resume there by owner token.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, LeaseholdError, NotAcquired, status } from '@leasehold/client';
import { eventually, haveRedis, lockName, sleep, startBroker, startRedis } from './helpers.mjs';

test('a lease outlives the death of its broker: the stream resumes it on the next replica', async (t) => {
  if (!haveRedis()) return t.skip('no redis-server on the PATH');
  const redis = await startRedis();
  const a = await startBroker([], { store: redis.url });
  const b = await startBroker([], { store: redis.url });
  const client = connect(`${a.address},${b.address}`, { logger: null });
  try {
    assert.deepEqual(client.targets, [a.address, b.address]);
    assert.equal(client.target, a.address);
    const ttlMs = 2000;
    const lease = await client.acquire(lockName('failover'), { ttlMs });
    const lost = [];
    lease.onLost((reason) => lost.push(reason));
    const first = lease.deadline;
    await eventually(() => lease.deadline > first, 'a renewal was confirmed by the first broker');

    await a.kill();
    const killedAt = performance.now();
    await eventually(() => client.target === b.address, 'the client moved to the second broker');
    const deadlineAtMove = lease.deadline;
    await eventually(() => lease.deadline > deadlineAtMove, 'a renewal was confirmed by the second broker');
    // Held across two TTLs after the kill: renewed on b all along.
    await sleep(Math.max(0, killedAt + 2 * ttlMs - performance.now()));
    assert.deepEqual(lost, []);
    assert.equal(lease.lostReason, null);
    const d = await client.describe(lease.name);
    assert.equal(d.held, true);
    assert.equal(d.fence, lease.fence);
    await lease.release();
    assert.equal((await client.describe(lease.name)).held, false);

    // A client whose first address is dead goes straight on to the next.
    const late = connect([a.address, b.address], { logger: null });
    try {
      const next = await late.acquire(lease.name, { ttlMs });
      assert.ok(next.fence > lease.fence);
      assert.equal(late.target, b.address);
      await next.release();
    } finally {
      await late.close();
    }
  } finally {
    await client.close();
    await a.kill();
    await b.kill();
    await redis.kill();
  }
});

// Killed (SIGKILL) while a wait is on it: the Session stream breaks, and the
// wait fails UNAVAILABLE as the unary call on a broken connection does (the
// same with `session: false`); the held lease resumes on the next replica and
// the next acquire goes there.
for (const [mode, options, gaugeName] of [['Session stream', {}, 'leasehold_session_streams'], ['unary calls and KeepAlive', { session: false }, 'leasehold_keepalive_streams']]) {
  test(`the broker killed during a wait (${mode}): the wait fails UNAVAILABLE, the lease resumes on the next replica, the next acquire goes there`, async (t) => {
    if (!haveRedis()) return t.skip('no redis-server on the PATH');
    const redis = await startRedis();
    const a = await startBroker([], { store: redis.url });
    const b = await startBroker([], { store: redis.url });
    const watcher = connect(b.address, { logger: null, session: false });
    const client = connect([a.address, b.address], { logger: null, ...options });
    const gauge = async (broker) => Number(new RegExp(`^${gaugeName} (\\d+)$`, 'm').exec(await broker.metrics())[1]);
    try {
      const name = lockName('killed-wait');
      const holder = await watcher.acquire(name, { ttlMs: 30_000, holder: 'holder' });
      const lease = await client.acquire(lockName('kept-across'), { ttlMs: 2000 });
      const lost = [];
      lease.onLost((reason) => lost.push(reason));
      const waiting = client.acquire(name, { ttlMs: 5000, waitMs: 60_000 });
      await eventually(async () => (await watcher.describe(name)).waiters === 1, 'the waiter queued on the first broker');
      waiting.catch(() => {}); // (a failure before the assertion below is not an unhandled rejection)
      await eventually(async () => (await gauge(a)) === 1, 'the client\'s stream is open on the first broker'); // KeepAlive: from the first heartbeat

      await a.kill();
      await assert.rejects(waiting, (err) => {
        assert.ok(err instanceof LeaseholdError && !(err instanceof NotAcquired), String(err));
        assert.equal(err.code, status.UNAVAILABLE, err.message);
        return true;
      });
      await eventually(() => client.target === b.address, 'the client moved to the second broker');
      const moved = lease.deadline;
      await eventually(() => lease.deadline > moved, 'a renewal was confirmed by the second broker');
      await eventually(async () => (await gauge(b)) === 1, 'the client\'s one stream is on the second broker now');
      // The dead broker's waiter leaves the line within 3 s: wait past it.
      await holder.release();
      const next = await client.acquire(name, { ttlMs: 5000, waitMs: 10_000 });
      assert.ok(next.fence > holder.fence);
      assert.equal(client.target, b.address);
      await next.release();
      assert.deepEqual(lost, []);
      await lease.release();
    } finally {
      await client.close();
      await watcher.close();
      await a.kill();
      await b.kill();
      await redis.kill();
    }
  });
}
