// Every refusal the public API can meet, sent to a real broker: each one's
// reason (from the broker's status details, or the Session stream's
// SessionError), and a message in the caller's words: a refusal of an
// argument names this client's option, and no message shows a proto field
// name (read from the .proto here), grpc-js's transport text, or a text
// twice. Both ways requests travel: the Session stream and unary calls.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { connect, LeaseholdError, LeaseLost, NotAcquired, PROTO_DIR, status } from '@leasehold/client';
import { eventually, freePort, lockName, sleep, startBroker } from './helpers.mjs';

const PROTO = fileURLToPath(new URL('../../../proto/leasehold/v1/leasehold.proto', import.meta.url));
const MAX_WAIT_MS = 2000;
const MAX_LOCK_DELAY_MS = 5000;
const MAX_LIMIT = 8;

/** Every field of the proto whose name has an underscore (ttl_ms, owner_token, keep_place...). */
function protoFieldsWithUnderscores() {
  const field = /^\s*(?:repeated\s+|optional\s+)?(?:map<[^>]*>|[A-Za-z_][\w.]*)\s+([a-z_][a-z0-9_]*)\s*=\s*\d+\s*[;[]/;
  const names = new Set();
  for (const raw of readFileSync(PROTO, 'utf8').split('\n')) {
    const found = field.exec(raw.split('//')[0]);
    if (found && found[1].includes('_')) names.add(found[1]);
  }
  return names;
}
const FIELDS = protoFieldsWithUnderscores();

// What gRPC libraries and transports put around a message.
const TRANSPORT = [
  'Client specified',
  'tcp connect error: tcp connect error',
  'No connection established',
  'Last error',
  'Resolution note',
  'Error: ',
  'UNKNOWN:',
  'ipv4:',
  'ipv6:',
  /^\d+ [A-Z_]+: /, // grpc-js's ServiceError message: "14 UNAVAILABLE: ..."
];

/** The options of this client a refusal may name. */
const OPTIONS = ['name', 'ttlMs', 'waitMs', 'lockDelayMs', 'limit', 'holder', 'ownerToken', 'value', 'election', 'tenant'];

/** The error's message, checked: no proto field name, no transport text, no part said twice in a row. */
function checkMessage(err) {
  assert.ok(err instanceof LeaseholdError, String(err));
  const text = err.message;
  assert.ok(text, 'a message');
  const leaked = (text.match(/[A-Za-z0-9_]+/g) ?? []).filter((w) => FIELDS.has(w));
  assert.deepEqual(leaked, [], `${JSON.stringify(text)} names proto fields`);
  for (const noise of TRANSPORT) {
    assert.ok(typeof noise === 'string' ? !text.includes(noise) : !noise.test(text), `${JSON.stringify(text)} has transport text ${noise}`);
  }
  const parts = text.split(': ');
  parts.slice(1).forEach((part, i) => assert.notEqual(part, parts[i], `${JSON.stringify(text)} repeats itself`));
  return text;
}

async function refused(promise, kind = LeaseholdError) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof kind, `${err?.constructor?.name}: ${err}`);
    checkMessage(err);
    return err;
  }
  assert.fail('not refused');
}

function badArgument(err, argument, option) {
  assert.equal(err.code, status.INVALID_ARGUMENT, err.message);
  assert.equal(err.reason, 'BAD_ARGUMENT', err.message);
  assert.equal(err.metadata.argument, argument);
  assert.ok(err.message.startsWith(`${option}=`) || err.message.startsWith(`${option}:`), err.message);
  assert.ok(err.details && err.message.endsWith(err.details), err.message);
}

test('the field names come from the proto', () => {
  for (const f of ['wait_timeout_ms', 'ttl_ms', 'owner_token', 'keep_place', 'lock_delay_ms']) assert.ok(FIELDS.has(f), f);
  assert.ok(!OPTIONS.some((o) => FIELDS.has(o)), 'an option spelt as a proto field');
});

describe('refusals', () => {
  let broker, operator;
  before(async () => {
    broker = await startBroker(['--max-wait', `${MAX_WAIT_MS / 1000}s`, '--max-lock-delay', `${MAX_LOCK_DELAY_MS / 1000}s`,
      '--max-semaphore-limit', String(MAX_LIMIT), '--enable-revoke']);
    operator = connect(broker.address, { logger: null });
  });
  after(async () => {
    await operator?.close();
    await broker?.kill();
  });

  for (const [mode, options] of [['Session stream', {}], ['unary calls', { session: false }]]) {
    describe(mode, () => {
      let client;
      before(() => { client = connect(broker.address, { logger: null, ...options }); });
      after(async () => { await client?.close(); });

      test('a TTL too short and too long', async () => {
        let err = await refused(client.acquire(lockName('ttl'), { ttlMs: 100 }));
        badArgument(err, 'ttl', 'ttlMs');
        assert.ok(err.message.startsWith('ttlMs=100: '), err.message);
        assert.equal(err.metadata.ttl_ms, '100');
        assert.ok(Number(err.metadata.min_ttl_ms) > 100);
        err = await refused(client.acquire(lockName('ttl'), { ttlMs: 86_400_000 }));
        badArgument(err, 'ttl', 'ttlMs');
        assert.ok(err.message.startsWith('ttlMs=86400000: '), err.message);
        assert.ok(Number(err.metadata.max_ttl_ms) < 86_400_000);
      });

      test('a bad name, a long holder, a long lock-delay, a big limit, an empty owner token', async () => {
        let err = await refused(client.acquire('no spaces allowed', { ttlMs: 5000 }));
        badArgument(err, 'name', 'name');
        assert.ok(err.message.startsWith('name="no spaces allowed": '), err.message);
        err = await refused(client.acquire(lockName('holder'), { ttlMs: 5000, holder: 'h'.repeat(5000) }));
        badArgument(err, 'holder', 'holder');
        assert.ok(Number(err.metadata.max_holder_len) < 5000);
        err = await refused(client.acquire(lockName('delay'), { ttlMs: 5000, lockDelayMs: MAX_LOCK_DELAY_MS + 1000 }));
        badArgument(err, 'lock_delay', 'lockDelayMs');
        assert.ok(err.message.startsWith(`lockDelayMs=${MAX_LOCK_DELAY_MS + 1000}: `), err.message);
        assert.equal(err.metadata.max_lock_delay_ms, String(MAX_LOCK_DELAY_MS));
        err = await refused(client.acquire(lockName('limit'), { ttlMs: 5000, limit: MAX_LIMIT + 1 }));
        badArgument(err, 'limit', 'limit');
        assert.ok(err.message.startsWith(`limit=${MAX_LIMIT + 1}: `), err.message);
        assert.equal(err.metadata.max_limit, String(MAX_LIMIT));
        err = await refused(client.describe('no spaces allowed'));
        badArgument(err, 'name', 'name');
        // Named, never shown (a secret).
        err = await refused(client.releaseToken(lockName('token'), ''));
        badArgument(err, 'owner_token', 'ownerToken');
        assert.ok(err.message.startsWith('ownerToken: '), err.message);
      });

      test('a held lock and no wait, or a short one', async () => {
        const name = lockName('held');
        const held = await operator.acquire(name, { ttlMs: 30_000, holder: 'the-holder' });
        try {
          let err = await refused(client.acquire(name, { ttlMs: 5000 }), NotAcquired);
          assert.equal(err.code, status.ABORTED);
          assert.equal(err.reason, 'LOCK_HELD');
          assert.equal(err.metadata.holder, 'the-holder');
          assert.equal(err.metadata.fence, String(held.fence));
          assert.ok(err.retryAfterMs > 0 && err.retryAfterMs <= 30_000, String(err.retryAfterMs));
          assert.match(err.message, /the-holder/);
          err = await refused(client.acquire(name, { ttlMs: 5000, waitMs: 200 }), NotAcquired);
          assert.equal(err.reason, 'LOCK_HELD');
          assert.ok(Number(err.metadata.waited_ms) > 0);
        } finally {
          await held.release();
        }
      });

      test('a finite wait longer than --max-wait is chained, with the limit from the refusal\'s details', async (t) => {
        const name = lockName('finite-chain');
        const held = await operator.acquire(name, { ttlMs: 30_000 });
        const started = performance.now();
        // A new client: it has not learnt the broker's --max-wait yet.
        const waiter = connect(broker.address, { logger: null, ...options });
        t.after(() => waiter.close());
        const waiting = waiter.acquire(name, { ttlMs: 5000, waitMs: 4 * MAX_WAIT_MS });
        let settled = false;
        waiting.then(() => { settled = true; }, () => { settled = true; });
        await eventually(async () => (await operator.describe(name)).waiters === 1, 'the waiter queued');
        // Past --max-wait, still waiting: its first call was refused
        // (BAD_ARGUMENT, max_wait_ms) and the chain went on within it.
        await sleep(Math.max(0, started + MAX_WAIT_MS + 500 - performance.now()));
        assert.equal(settled, false, 'the wait ended early');
        await held.release();
        const lease = await waiting;
        assert.ok(lease.fence > held.fence);
        await lease.release();
        // Run out: NotAcquired, LOCK_HELD, never the refusal of the wait.
        const again = await operator.acquire(name, { ttlMs: 30_000 });
        const err = await refused(client.acquire(name, { ttlMs: 5000, waitMs: MAX_WAIT_MS + 500 }), NotAcquired);
        assert.equal(err.reason, 'LOCK_HELD');
        await again.release();
      });

      test('waitMs: null past --max-wait is chained, with the limit from the refusal\'s details', async (t) => {
        const name = lockName('chain');
        const held = await operator.acquire(name, { ttlMs: 30_000 });
        const started = performance.now();
        // A new client: it has not learnt the broker's --max-wait yet.
        const waiter = connect(broker.address, { logger: null, ...options });
        t.after(() => waiter.close());
        const waiting = waiter.acquire(name, { ttlMs: 5000, waitMs: null });
        let settled = false;
        waiting.then(() => { settled = true; }, () => { settled = true; });
        await eventually(async () => (await operator.describe(name)).waiters === 1, 'the waiter queued');
        // Past --max-wait, still waiting: the first call (5 minutes) was
        // refused and the chain went on with calls of max_wait_ms.
        await sleep(Math.max(0, started + MAX_WAIT_MS + 500 - performance.now()));
        assert.equal(settled, false, 'the wait ended early');
        await held.release();
        const lease = await waiting;
        assert.ok(lease.fence > held.fence);
        await lease.release();
      });

      test('releases of leases gone, and a revocation', async () => {
        // A name nobody holds: NOT_FOUND, LEASE_NOT_HELD, a loss EXPIRED.
        let err = await refused(client.releaseToken(lockName('free'), randomBytes(16).toString('hex')), LeaseLost);
        assert.equal(err.code, status.NOT_FOUND);
        assert.equal(err.reason, 'EXPIRED');
        // A stranger's token: FAILED_PRECONDITION, NOT_OWNER.
        const name = lockName('stranger');
        const held = await operator.acquire(name, { ttlMs: 30_000 });
        err = await refused(client.releaseToken(name, randomBytes(16).toString('hex')), LeaseLost);
        assert.equal(err.code, status.FAILED_PRECONDITION);
        assert.equal(err.reason, 'NOT_OWNER');
        assert.equal(err.metadata.fence, String(held.fence));
        await held.release();
        // Revoked: its release says REVOKED (NOT_FOUND, LEASE_REVOKED), and
        // the holder hears it lost, REVOKED.
        const revoked = lockName('revoked');
        const lease = await client.acquire(revoked, { ttlMs: 30_000 });
        assert.equal(await operator.revoke(revoked), lease.fence);
        err = await refused(operator.releaseToken(revoked, lease.ownerToken), LeaseLost);
        assert.equal(err.code, status.NOT_FOUND);
        assert.equal(err.reason, 'REVOKED');
        assert.equal(err.metadata.fence, String(lease.fence));
        assert.equal(await lease.lost, 'REVOKED');
        err = await refused(lease.release(), LeaseLost);
        assert.equal(err.reason, 'REVOKED');
        // Revoking a name nobody holds: NOT_FOUND, LEASE_NOT_HELD.
        err = await refused(operator.revoke(lockName('nobody')));
        assert.equal(err.code, status.NOT_FOUND);
        assert.equal(err.reason, 'LEASE_NOT_HELD');
      });

      test('a release of an expired lease', async () => {
        // Taken by a raw call (nobody renews it), left to expire.
        const name = lockName('expired');
        const definition = protoLoader.loadSync('leasehold/v1/leasehold.proto', { includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: String, defaults: true });
        const Stub = grpc.loadPackageDefinition(definition).leasehold.v1.LeaseholdService;
        const raw = new Stub(broker.address, grpc.credentials.createInsecure());
        const granted = await new Promise((resolve, reject) => raw.Acquire({ name, ttl_ms: 500, holder: 'gone' }, (err, res) => (err ? reject(err) : resolve(res))));
        raw.close();
        await eventually(async () => !(await client.describe(name)).held, 'the lease expired');
        const err = await refused(client.releaseToken(name, granted.lease.owner_token), LeaseLost);
        assert.equal(err.code, status.NOT_FOUND);
        assert.equal(err.reason, 'EXPIRED');
      });

      test('a cap reached: --max-waiters 1, a second waiter', async () => {
        const capped = await startBroker(['--max-waiters', '1']);
        const [holder, first, second] = [connect(capped.address, { logger: null }), connect(capped.address, { logger: null }), connect(capped.address, { logger: null, ...options })];
        try {
          const name = lockName('cap');
          const held = await holder.acquire(name, { ttlMs: 30_000 });
          const waiting = first.acquire(name, { ttlMs: 5000, waitMs: 30_000 });
          await eventually(async () => (await holder.describe(name)).waiters === 1, 'the first waiter queued');
          const err = await refused(second.acquire(name, { ttlMs: 5000, waitMs: 10_000 }));
          assert.equal(err.code, status.RESOURCE_EXHAUSTED);
          assert.equal(err.reason, 'LIMIT_REACHED');
          assert.equal(err.metadata.limit, 'max-waiters');
          await held.release();
          await (await waiting).release();
        } finally {
          await Promise.all([holder.close(), first.close(), second.close()]);
          await capped.kill();
        }
      });

      test('a broker that cannot be reached', async () => {
        const nobody = connect(`127.0.0.1:${await freePort()}`, { logger: null, timeoutMs: 5000, ...options });
        try {
          const err = await refused(nobody.acquire(lockName('nobody'), { ttlMs: 5000 }));
          assert.equal(err.code, status.UNAVAILABLE);
          assert.equal(err.reason, '');
          assert.ok(err.message.startsWith('could not connect to the broker'), err.message);
        } finally {
          await nobody.close();
        }
      });
    });
  }
});
