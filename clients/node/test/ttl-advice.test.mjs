// The broker's TTL advice and `ttlMs: 'auto'`, against a real broker
// (helpers.mjs) that allows short TTLs (--ttl-min 100ms) and picks auto TTLs
// of at least 1 s (--ttl-auto-floor 1s). A slow network is a TCP proxy that
// delays what it carries (delayingProxy): the heartbeats' round trips grow by
// twice its delay, and the client reports them (last_round_trip_us).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, LeaseholdError } from '@leasehold/client';
import { delayingProxy, eventually, lockName, startBroker } from './helpers.mjs';

const now = () => performance.now(); // the clock of lease.deadline

const FLOOR_MS = 1000;

// A client whose warnings are kept, with the advice its onTtlAdvice got.
function watched(target, options = {}) {
  const warnings = [];
  const advised = [];
  const client = connect(target, {
    logger: { warn: (m) => { warnings.push(m); if (process.env.LEASEHOLD_TEST_LOG) console.log(m); } },
    onTtlAdvice: (advice) => advised.push(advice),
    ...options,
  });
  const adviceWarnings = () => warnings.filter((w) => w.startsWith('TTL too short'));
  return { client, warnings, advised, adviceWarnings };
}

// The connection made before the lease is taken: an acquire's deadline
// counts from its send time, and through the proxy the connection's setup
// alone (TCP, HTTP/2 settings) takes several delayed round trips.
const warmUp = (client) => client.describe('node-test/warm-up');

// Resolves once `lease` has been renewed `count` more times (its deadline moved).
async function renewals(lease, count, what) {
  for (let i = 0; i < count; i++) {
    const before = lease.deadline;
    await eventually(() => lease.deadline > before, `${what}: renewal ${i + 1} of ${count}`);
  }
}

describe('TTL advice and ttlMs: \'auto\'', () => {
  let broker;
  before(async () => {
    broker = await startBroker(['--ttl-min', '100ms', '--ttl-auto-floor', `${FLOOR_MS}ms`]);
  });
  after(async () => {
    await broker?.kill();
  });

  for (const session of [true, false]) {
    const stream = session ? 'Session stream' : 'KeepAlive stream';
    test(`${stream}: a short TTL behind a slow network is advised once; a fast stream with a long TTL is not`, async () => {
      // 40 ms each way: round trips of 80 ms and more, 10 x that above the 600 ms TTL.
      const proxy = await delayingProxy(broker.address, 40);
      const slow = watched(proxy.address, { session });
      const fast = watched(broker.address, { session });
      try {
        await Promise.all([warmUp(slow.client), warmUp(fast.client)]);
        const [short, long] = await Promise.all([
          slow.client.acquire(lockName('advised'), { ttlMs: 600 }),
          fast.client.acquire(lockName('not-advised'), { ttlMs: 2000 }),
        ]);
        await eventually(() => slow.advised.length > 0, 'the slow stream is advised', 15_000);
        const advice = slow.advised[0];
        assert.ok(advice.roundTripP99Us >= 80_000, `p99 ${advice.roundTripP99Us} us counts the proxy's delay both ways`);
        assert.equal(advice.shortestTtlMs, 600);
        assert.equal(advice.leasesBelow, 1);
        assert.ok(advice.suggestedTtlMs >= Math.max(FLOOR_MS, advice.roundTripP99Us / 100), `suggested ${advice.suggestedTtlMs} ms: 10 x the p99, at least the floor`);
        assert.ok(advice.message.length > 0);
        assert.deepEqual(slow.client.ttlAdvice && Object.keys(slow.client.ttlAdvice).sort(), ['leasesBelow', 'message', 'roundTripP99Us', 'shortestTtlMs', 'suggestedTtlMs']);

        // More heartbeats, more advice: still one warning and one callback for the stream.
        await renewals(short, 3, 'the short lease');
        assert.ok(slow.client.ttlAdvice, 'the latest heartbeat still carries advice');
        assert.equal(slow.advised.length, 1);
        assert.equal(slow.adviceWarnings().length, 1, slow.warnings.join('\n'));
        assert.match(slow.adviceWarnings()[0], /1 lease\(s\) with a TTL under 10 x the round-trip p99 \(\d+\.\d ms; shortest TTL 600 ms\): use ttlMs >= \d+ or ttlMs: 'auto'/);

        // The fast stream: enough heartbeats measured (3 make a p99), none advised.
        await renewals(long, 5, 'the long lease');
        assert.equal(fast.client.ttlAdvice, null);
        assert.deepEqual(fast.advised, []);
        assert.deepEqual(fast.adviceWarnings(), []);
        assert.equal(short.lostReason, null);
        assert.equal(long.lostReason, null);
        await Promise.all([short.release(), long.release()]);
      } finally {
        await Promise.all([slow.client.close(), fast.client.close()]);
        await proxy.close();
      }
    });
  }

  test('auto: the granted TTL is at least the floor; heartbeats keep the lease with ttl_auto', async () => {
    const { client, advised } = watched(broker.address);
    try {
      const lease = await client.acquire(lockName('auto'), { ttlMs: 'auto' });
      assert.equal(lease.ttlAuto, true);
      assert.ok(lease.ttlMs >= FLOOR_MS, `granted ${lease.ttlMs} ms, the floor is ${FLOOR_MS}`);
      assert.ok(lease.deadline - now() <= lease.ttlMs);
      await renewals(lease, 4, 'the auto lease');
      assert.ok(lease.ttlMs >= FLOOR_MS);
      assert.equal(lease.lostReason, null);
      assert.deepEqual(advised, [], 'an auto lease is fit for the latency measured');
      await lease.release();
      const fixed = await client.acquire(lockName('fixed'), { ttlMs: 700 });
      assert.equal(fixed.ttlAuto, false);
      assert.equal(fixed.ttlMs, 700);
      await fixed.release();
    } finally {
      await client.close();
    }
  });

  for (const session of [true, false]) {
    const stream = session ? 'Session stream' : 'KeepAlive stream';
    test(`auto on a slow ${stream}: the TTL grows past the floor with the measured latency, the deadline and heartbeats follow`, async () => {
      // 60 ms each way: round trips of 120 ms and more, 10 x that is 1.2 s
      // and more (the first TTL, the floor, still leaves the first heartbeat
      // time to be answered).
      const proxy = await delayingProxy(broker.address, 60);
      const { client } = watched(proxy.address, { session });
      try {
        await warmUp(client);
        const lease = await client.acquire(lockName('auto-slow'), { ttlMs: 'auto' });
        const first = lease.ttlMs;
        // Until a stream has measured three round trips, and for a unary
        // Acquire (KeepAlive), the broker fits the TTL to the round trips
        // of the tenant's streams on it (the earlier tests' among them:
        // once 1,040 ms in a full run, their p99 104 ms), at least the
        // floor.
        assert.ok(first >= FLOOR_MS, `granted ${first} ms`);
        await eventually(() => lease.ttlMs >= 1200 || lease.lostReason, 'the TTL follows the round trips', 20_000);
        assert.equal(lease.lostReason, null);
        assert.ok(lease.ttlMs >= 1200, `${lease.ttlMs} ms`);
        // The deadline counts from the TTL in force, never beyond it.
        assert.ok(lease.deadline - now() <= lease.ttlMs - lease.marginMs, `deadline ${lease.deadline - now()} ms away, TTL ${lease.ttlMs} ms`);
        assert.equal(lease.marginMs, lease.ttlMs / 10);
        await renewals(lease, 2, 'the grown auto lease');
        assert.equal(lease.lostReason, null);
        await lease.release();
      } finally {
        await client.close();
        await proxy.close();
      }
    });
  }

  test('campaign has no auto TTL: refused in the caller\'s words', async () => {
    const client = connect(broker.address, { logger: null });
    try {
      await assert.rejects(client.campaign('e', 'v', { ttlMs: 'auto' }), (err) => err instanceof LeaseholdError && /campaign takes a ttlMs in milliseconds/.test(err.message));
    } finally {
      await client.close();
    }
  });
});
