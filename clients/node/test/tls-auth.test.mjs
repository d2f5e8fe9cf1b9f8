// TLS, mutual TLS and bearer tokens against a real broker (helpers.mjs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { connect as connectLoud, status } from '@leasehold/client';
import { MIN_TTL, lockName, sleep, startBroker } from './helpers.mjs';

const connect = (target, options = {}) => connectLoud(target, { logger: null, ...options });

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
      assert.equal((await client.checkFence(lease.name, lease.fence)).current, true);
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
