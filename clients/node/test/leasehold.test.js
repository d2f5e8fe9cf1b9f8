// Tests against a real broker (`leasehold serve --store memory` on a free port).
// The binary is $LEASEHOLD_BIN, or target/debug/leasehold of this checkout.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import net from 'node:net';
import { inspect } from 'node:util';
import { fileURLToPath } from 'node:url';
import { connect, status } from '../leasehold.js';

const BIN = process.env.LEASEHOLD_BIN || fileURLToPath(new URL('../../../target/debug/leasehold', import.meta.url));
const MIN_TTL = 500; // the broker's minimum TTL
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let unique = 0;
const lockName = (what) => `node-test/${what}/${process.pid}-${++unique}`;

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

function canConnect(port) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    sock.once('connect', () => { sock.destroy(); resolve(true); });
    sock.once('error', () => resolve(false));
  });
}

// Starts a broker and waits until its port accepts connections.
async function startBroker() {
  if (!existsSync(BIN)) throw new Error(`broker binary not found at ${BIN}: build it (cargo build --bin leasehold) or set LEASEHOLD_BIN`);
  const port = await freePort();
  const address = `127.0.0.1:${port}`;
  const proc = spawn(BIN, ['serve', '--store', 'memory', '--listen', address, '--metrics-listen', '127.0.0.1:0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  proc.stdout.on('data', (d) => (output += d));
  proc.stderr.on('data', (d) => (output += d));
  const exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));
  let gone = null;
  exited.then((e) => (gone = e));
  const end = Date.now() + 20_000;
  // Polling is for startup only: nothing else says when the port is bound.
  while (!(await canConnect(port))) {
    if (gone) throw new Error(`broker exited (${JSON.stringify(gone)}): ${output}`);
    if (Date.now() > end) { proc.kill('SIGKILL'); throw new Error(`broker did not listen on ${address} within 20 s: ${output}`); }
    await sleep(20);
  }
  return {
    address,
    async kill() { // SIGKILL: no clean shutdown, streams just break
      if (!gone) { proc.kill('SIGKILL'); await exited; }
    },
  };
}

describe('against one broker', () => {
  let broker, client;
  before(async () => {
    broker = await startBroker();
    client = connect(broker.address);
  });
  after(async () => {
    await client?.close();
    await broker?.kill();
  });

  test('acquire gives a fence, and a second acquire is refused with ABORTED', async () => {
    const name = lockName('exclusive');
    const lease = await client.acquire(name, { ttlMs: 5000, holder: 'first' });
    assert.equal(typeof lease.fence, 'bigint');
    assert.ok(lease.fence > 0n);
    assert.equal(lease.name, name);
    assert.ok(lease.deadline > performance.now(), 'deadline is in the future');
    assert.ok(lease.deadline <= performance.now() + 5000, 'deadline is no later than the TTL');

    const other = connect(broker.address);
    try {
      await assert.rejects(other.acquire(name, { ttlMs: 5000, holder: 'second' }), (err) => {
        assert.equal(err.code, status.ABORTED);
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

  test('a kept-alive lease outlives several TTLs with the same fence', async () => {
    const name = lockName('keepalive');
    const lease = await client.acquire(name, { ttlMs: MIN_TTL });
    const firstDeadline = lease.deadline;
    await sleep(MIN_TTL * 5);
    assert.equal(lease.lostReason, null);
    assert.ok(lease.deadline > firstDeadline + MIN_TTL * 3, 'the local deadline moved forward');
    const d = await client.describe(name);
    assert.equal(d.held, true);
    assert.equal(d.fence, lease.fence);
    // A hair over the TTL is possible: the memory store's Describe reads its
    // clock before a concurrent renewal that reads a later one, then rounds up.
    assert.ok(d.remainingMs > 0 && d.remainingMs <= MIN_TTL + 50, `remaining ${d.remainingMs} ms`);
    assert.equal(await client.checkFence(name, lease.fence), true);
    await lease.release();
  });

  test('release frees the lock, and checkFence is true before and false after', async () => {
    const name = lockName('release');
    const lease = await client.acquire(name, { ttlMs: 5000, holder: 'releaser' });
    const held = await client.describe(name);
    assert.equal(held.held, true);
    assert.equal(held.holder, 'releaser');
    assert.equal(await client.checkFence(name, lease.fence), true);

    await lease.release();
    assert.equal((await client.describe(name)).held, false);
    assert.equal(await client.checkFence(name, lease.fence), false);
    // Free at once, and granted with a higher fence.
    const next = await client.acquire(name, { ttlMs: 5000 });
    assert.ok(next.fence > lease.fence);
    await next.release();
  });
});

test('killing the broker resolves lease.lost within the TTL plus a margin', async () => {
  const broker = await startBroker();
  const client = connect(broker.address);
  try {
    const ttl = MIN_TTL;
    const lease = await client.acquire(lockName('killed'), { ttlMs: ttl });
    await sleep(ttl); // a few heartbeats first, so the kill lands on a live stream
    assert.equal(lease.lostReason, null);
    const killedAt = performance.now();
    await broker.kill();
    const margin = 1500;
    const reason = await Promise.race([lease.lost, sleep(ttl + margin).then(() => 'timed out')]);
    const took = performance.now() - killedAt;
    assert.equal(reason, 'DEADLINE_PASSED', `lost after ${took.toFixed(0)} ms`);
    assert.ok(took <= ttl + margin, `lost after ${took.toFixed(0)} ms`);
    assert.equal(lease.lostReason, 'DEADLINE_PASSED');
    await assert.rejects(lease.release(), /lost/);
  } finally {
    await client.close();
    await broker.kill();
  }
});
