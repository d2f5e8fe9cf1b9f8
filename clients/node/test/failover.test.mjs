// Several broker replicas sharing one store (a real redis-server): calls and
// the KeepAlive stream move to the next replica when one cannot be reached,
// and the leases resume there by owner token.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from '@leasehold/client';
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
