// Holder A of the GC-pause story (fence.test.mjs), a process of its own so
// that the test can stop it (SIGSTOP) as a long GC pause would: it takes the
// lock, writes through the fence guard, checks that its lease still holds,
// and says so; the test stops it right there, lets the lease expire and
// another holder take the lock and write, then resumes it and sends "write":
// A makes the write it was about to make, with its old fence, as a paused
// process does (it does not know it was paused). Each step is one JSON line
// on stdout.
//
// node paused-holder.mjs <broker> <postgres port> <lock name> <ttl ms>
import { createInterface } from 'node:readline';
import pg from 'pg';
import { connect, guardedUpdate } from '@leasehold/client';

const [broker, pgPort, name, ttl] = process.argv.slice(2);
const say = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
const input = createInterface({ input: process.stdin });
const lines = input[Symbol.asyncIterator]();

const client = connect(broker, { logger: null });
const db = new pg.Client({ host: '127.0.0.1', port: Number(pgPort), user: 'postgres', database: 'postgres' });
await db.connect();
const lease = await client.acquire(name, { ttlMs: Number(ttl) });
await guardedUpdate(db, { table: 'accounts', key: { id: 1 }, set: { owner: 'A', balance: 100 }, fence: lease.fence });
say({ step: 'wrote', fence: String(lease.fence) });

lease.check(); // still held: the next write is safe, as far as A can tell
say({ step: 'checked' });
// <- stopped here by the test (the pause), resumed later
const { value: command } = await lines.next();
input.close(); // stdin would keep the process alive
if (command !== 'write') throw new Error(`expected "write", got ${JSON.stringify(command)}`);
try {
  await guardedUpdate(db, { table: 'accounts', key: { id: 1 }, set: { owner: 'A', balance: 50 }, fence: lease.fence });
  say({ step: 'late write', result: 'written' });
} catch (err) {
  say({ step: 'late write', result: err.name, fence: String(err.fence), currentFence: String(err.currentFence), message: err.message });
}
await db.end();
await client.close();
