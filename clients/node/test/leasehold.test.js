// Tests against a real broker (`leasehold serve --store memory` on a free port).
// The binary is $LEASEHOLD_BIN, or target/debug/leasehold of this checkout.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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

// Starts a broker (with more `serve` flags, if given) and waits until its port
// accepts connections.
async function startBroker(args = []) {
  if (!existsSync(BIN)) throw new Error(`broker binary not found at ${BIN}: build it (cargo build --bin leasehold) or set LEASEHOLD_BIN`);
  const port = await freePort();
  const address = `127.0.0.1:${port}`;
  const proc = spawn(BIN, ['serve', '--store', 'memory', '--listen', address, '--metrics-listen', '127.0.0.1:0', ...args], {
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
    port,
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

// Throwaway certificates made with the openssl command (none is committed): a
// CA, a server certificate for localhost and 127.0.0.1, a client CA and a
// client certificate. Returns the directory's file paths, or null without openssl.
function makeCerts() {
  if (spawnSync('openssl', ['version']).status !== 0) return null;
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-node-tls-'));
  const f = (name) => join(dir, name);
  const ssl = (...args) => execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  const ca = (name, cn) => ssl('req', '-x509', ...ec, '-keyout', f(`${name}.key`), '-out', f(`${name}.pem`), '-days', '1',
    '-subj', `/CN=${cn}`, '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
  const leaf = (name, cn, issuer, ext) => {
    writeFileSync(f(`${name}.ext`), ext);
    ssl('req', '-new', ...ec, '-keyout', f(`${name}.key`), '-out', f(`${name}.csr`), '-subj', `/CN=${cn}`);
    ssl('x509', '-req', '-in', f(`${name}.csr`), '-CA', f(`${issuer}.pem`), '-CAkey', f(`${issuer}.key`), '-CAcreateserial',
      '-out', f(`${name}.pem`), '-days', '1', '-extfile', f(`${name}.ext`));
  };
  ca('ca', 'leasehold node test CA');
  ca('client-ca', 'leasehold node test client CA');
  ca('other-ca', 'some other CA');
  leaf('server', 'localhost', 'ca', 'basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  leaf('client', 'node-client', 'client-ca', 'basicConstraints=CA:FALSE\nsubjectAltName=DNS:node-client\nextendedKeyUsage=clientAuth\n');
  return { dir, f };
}

// Whether an Acquire through `client` works; the gRPC code if it fails.
async function tryAcquire(client, what) {
  try {
    const lease = await client.acquire(lockName(what), { ttlMs: 5000 });
    await lease.release();
    return 'ok';
  } catch (err) {
    return err.code;
  } finally {
    await client.close();
  }
}

test('mutual TLS: the right CA and a client certificate work, without either it fails', async (t) => {
  const certs = makeCerts();
  if (!certs) return t.skip('no openssl command to make certificates');
  const { f } = certs;
  const broker = await startBroker(['--tls-cert', f('server.pem'), '--tls-key', f('server.key'), '--tls-client-ca', f('client-ca.pem')]);
  try {
    // CA and identity as file paths; leases are renewed over the same channel.
    const client = connect(`https://${broker.address}`, { ca: f('ca.pem'), cert: f('client.pem'), key: f('client.key') });
    try {
      assert.equal(client.tls, true);
      const lease = await client.acquire(lockName('mtls'), { ttlMs: MIN_TTL });
      await sleep(MIN_TTL * 3);
      assert.equal(lease.lostReason, null);
      assert.equal(await client.checkFence(lease.name, lease.fence), true);
      await lease.release();
    } finally {
      await client.close();
    }
    // The same as Buffers, with a host:port target (TLS from the options).
    const pem = (name) => readFileSync(f(name));
    assert.equal(await tryAcquire(connect(broker.address, { ca: pem('ca.pem'), cert: pem('client.pem'), key: pem('client.key') }), 'mtls-buffers'), 'ok');
    // No client certificate, a CA that did not sign the broker's, or plaintext: refused.
    assert.equal(await tryAcquire(connect(broker.address, { ca: f('ca.pem') }), 'mtls-no-cert'), status.UNAVAILABLE);
    assert.equal(await tryAcquire(connect(broker.address, { ca: f('other-ca.pem'), cert: f('client.pem'), key: f('client.key') }), 'mtls-wrong-ca'), status.UNAVAILABLE);
    assert.equal(await tryAcquire(connect(broker.address), 'mtls-plaintext'), status.UNAVAILABLE);
  } finally {
    await broker.kill();
    rmSync(certs.dir, { recursive: true, force: true });
  }
});

test('bearer tokens: the right token works (KeepAlive too), none or a wrong one is UNAUTHENTICATED, tenants are apart', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-node-auth-'));
  const tokens = { payments: randomBytes(18).toString('base64url'), search: randomBytes(18).toString('base64url') };
  const sha = (s) => createHash('sha256').update(s).digest('hex');
  writeFileSync(join(dir, 'auth'), Object.entries(tokens).map(([tenant, tok]) => `${tenant} use token:sha256:${sha(tok)}\n`).join(''));
  const broker = await startBroker(['--auth-file', join(dir, 'auth')]);
  const payments = connect(broker.address, { token: tokens.payments });
  const search = connect(broker.address, { token: tokens.search });
  try {
    const shown = inspect(payments) + String(payments);
    assert.ok(!shown.includes(tokens.payments) && shown.includes('<redacted>'), shown);

    const name = lockName('tenants');
    const lease = await payments.acquire(name, { ttlMs: MIN_TTL, holder: 'payments' });
    await sleep(MIN_TTL * 4); // renewed over the KeepAlive stream, which carries the token too
    assert.equal(lease.lostReason, null);
    assert.equal((await payments.describe(name)).holder, 'payments');
    // The same name in another tenant is another lock.
    assert.equal((await search.describe(name)).held, false);
    const theirs = await search.acquire(name, { ttlMs: 5000, holder: 'search' });
    assert.equal((await search.describe(name)).holder, 'search');
    assert.equal((await payments.describe(name)).holder, 'payments');
    await theirs.release();
    await lease.release();

    const wrong = 'wrong-' + randomBytes(12).toString('hex');
    for (const [what, options] of [['no-token', {}], ['wrong-token', { token: wrong }]]) {
      const client = connect(broker.address, options);
      try {
        await assert.rejects(client.acquire(lockName(what), { ttlMs: 5000 }), (err) => {
          assert.equal(err.code, status.UNAUTHENTICATED, `${what}: ${err.message}`);
          assert.ok(!String(err.message).includes(wrong));
          return true;
        });
      } finally {
        await client.close();
      }
    }
  } finally {
    await payments.close();
    await search.close();
    await broker.kill();
    rmSync(dir, { recursive: true, force: true });
  }
});
