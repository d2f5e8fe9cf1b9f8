// Takes a lock, "writes" under it with its fence, and releases it.
//
//   node example.mjs [broker address, default 127.0.0.1:7420] [lock name]
//
// For a TLS broker give an https:// address; LEASEHOLD_BROKER_CA,
// LEASEHOLD_CLIENT_CERT and LEASEHOLD_CLIENT_KEY name PEM files. For a broker
// with an --auth-file, the bearer token is read from the file named by
// LEASEHOLD_AUTH_TOKEN_FILE, else from LEASEHOLD_AUTH_TOKEN (all as for the Rust CLI).
import { readFileSync } from 'node:fs';
import { connect, NotAcquired } from '@leasehold/client';

const target = process.argv[2] ?? process.env.LEASEHOLD_ADDR ?? '127.0.0.1:7420';
const name = process.argv[3] ?? 'examples/node';
const env = (key) => process.env[key] || undefined;
const tokenFile = env('LEASEHOLD_AUTH_TOKEN_FILE');
const token = (tokenFile ? readFileSync(tokenFile, 'utf8') : env('LEASEHOLD_AUTH_TOKEN') ?? '').trim() || undefined;
const options = { ca: env('LEASEHOLD_BROKER_CA'), cert: env('LEASEHOLD_CLIENT_CERT'), key: env('LEASEHOLD_CLIENT_KEY'), token };

// A stand-in for the storage the lock protects. It keeps the highest fence it
// has accepted and refuses lower ones: that, not the lock alone, is what stops
// a holder that was paused past its TTL from overwriting newer data.
const storage = {
  highestFence: 0n,
  write(key, value, fence) {
    if (fence < this.highestFence) throw new Error(`write refused: fence ${fence} < ${this.highestFence}`);
    this.highestFence = fence;
    console.log(`wrote ${key}=${value} with fence ${fence}`);
  },
};

const client = connect(target, options);
try {
  let lease;
  try {
    lease = await client.acquire(name, { ttlMs: 5000, waitMs: 10_000, holder: `node-example:${process.pid}` });
  } catch (err) {
    if (err instanceof NotAcquired) throw new Error(`busy: ${err.details}`); // names the holder
    throw err;
  }
  console.log(`acquired ${lease.name} with fence ${lease.fence} (waited ${lease.waitedMs} ms)`);
  lease.onLost((reason) => console.error(`lock lost (${reason}): stopping`));

  for (let i = 1; i <= 3; i++) {
    lease.check(); // throws LeaseLost once the lease is known lost: no write after that
    storage.write(`row${i}`, `value${i}`, lease.fence);
    await new Promise((r) => setTimeout(r, 200));
  }

  await lease.release();
  console.log(`released ${lease.name}`);
} finally {
  await client.close();
}
