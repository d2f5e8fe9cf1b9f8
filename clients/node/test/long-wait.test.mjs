// waitMs: null (as long as it takes), or longer than the broker's
// --max-wait of 2 s: a chain of calls, each waiting in the place in line the previous one
// kept (keep_place), so a caller that arrived later never overtakes it.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, NotAcquired } from '@leasehold/client';
import { eventually, lockName, sleep, startBroker } from './helpers.mjs';

const MAX_WAIT_MS = 2000;

describe('waits longer than --max-wait', () => {
  let broker, client;
  before(async () => {
    broker = await startBroker(['--max-wait', `${MAX_WAIT_MS / 1000}s`]);
    client = connect(broker.address, { logger: null });
  });
  after(async () => {
    await client?.close();
    await broker?.kill();
  });

  // The place each call keeps comes back in the SessionError (Session stream)
  // or in the status's trailing metadata (unary calls): the same either way.
  for (const [mode, options] of [['Session stream', {}], ['unary calls', { session: false }]]) {
    test(`waitMs: null keeps its turn across calls: a caller that arrived during its first call comes after it (${mode})`, async () => {
      const name = lockName('long-wait');
      const holder = await client.acquire(name, { ttlMs: 30_000 });
      const [a, b] = [connect(broker.address, { logger: null, ...options }), connect(broker.address, { logger: null, ...options })];
      try {
        const started = performance.now();
        const first = a.acquire(name, { ttlMs: 30_000, waitMs: null, holder: 'first' });
        await eventually(async () => (await client.describe(name)).waiters === 1, 'the first waiter queued');
        // The second arrives during the first one's first call and waits as
        // long as the broker allows: it outlives that call by about a second.
        await sleep(Math.max(0, started + 0.6 * MAX_WAIT_MS - performance.now()));
        let secondDone = false;
        const second = b.acquire(name, { ttlMs: 30_000, waitMs: MAX_WAIT_MS, holder: 'second' });
        second.then(() => { secondDone = true; }, () => { secondDone = true; });
        await eventually(async () => (await client.describe(name)).waiters === 2, 'the second waiter queued');
        assert.ok(performance.now() - started < MAX_WAIT_MS, 'the second queued during the first call (loaded machine?)');
        // Past the end of the first one's first call: two places all along.
        while (performance.now() - started < 1.2 * MAX_WAIT_MS) {
          assert.equal((await client.describe(name)).waiters, 2);
          await sleep(50);
        }
        assert.equal(secondDone, false, 'the second still waits (loaded machine?)');
        await holder.release();
        // Whoever gets the lock first (the second's refusal, later, is no grant).
        const [winner, lease] = await Promise.race([
          first.then((l) => ['first', l]),
          second.then((l) => ['second', l], () => new Promise(() => {})),
        ]);
        await lease.release();
        assert.equal(winner, 'first', 'the first waiter is granted before the one that arrived during its call');
        // The second's wait ran out meanwhile, or it got the lock after the first.
        await second.then((next) => next.release(), (err) => assert.ok(err instanceof NotAcquired, String(err)));
        await first;
      } finally {
        await a.close();
        await b.close();
      }
    });
  }

  test('a finite wait longer than --max-wait is a chain of calls that ends with NotAcquired, not a refusal', async () => {
    const name = lockName('too-long');
    const holder = await client.acquire(name, { ttlMs: 30_000 });
    const other = connect(broker.address, { logger: null });
    try {
      const waitMs = 2.5 * MAX_WAIT_MS;
      const started = performance.now();
      await assert.rejects(other.acquire(name, { waitMs }), (err) => err instanceof NotAcquired && err.reason === 'LOCK_HELD');
      const elapsed = performance.now() - started;
      assert.ok(elapsed >= waitMs - 200 && elapsed <= waitMs + 5000, String(elapsed));
      // It left the line when it gave up.
      await eventually(async () => (await client.describe(name)).waiters === 0, 'the caller left the line');
      await assert.rejects(other.acquire(name, { waitMs: 100 }), NotAcquired);
    } finally {
      await other.close();
      await holder.release();
    }
  });
});
