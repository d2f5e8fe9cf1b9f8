// The CommonJS entry point, as a require() user writes it: run by
// pack.test.mjs in an empty folder against the installed tarball and a real
// broker: node usage.cjs <broker address>.
'use strict';
const { connect, NotAcquired, Lease } = require('@leasehold/client');

(async () => {
  const client = connect(process.argv[2], { logger: null });
  const lease = await client.acquire(`smoke-cjs/${process.pid}`, { ttlMs: 2000 });
  const busy = await client.acquire(lease.name, { ttlMs: 2000 }).then(() => false, (err) => err instanceof NotAcquired);
  await lease.release();
  const free = !(await client.describe(lease.name)).held;
  await client.close();
  console.log(JSON.stringify({ fence: String(lease.fence), lease: lease instanceof Lease, busy, free }));
})().catch((err) => { console.error(err); process.exit(1); });
