// A typed usage of the package, as a TypeScript user writes it: type-checked
// by `npm run typecheck` (against this checkout) and, by pack.test.mjs,
// compiled in an empty folder against the installed tarball and run there
// against a real broker: node usage.mjs <broker address>.
// The @ts-expect-error lines are misuses the types must refuse.
import { connect, guardedPut, guardedUpdate, Lease, LeaseLost, NotAcquired, StaleFenceError, status } from '@leasehold/client';
import type { AcquireOptions, Description, FenceCheck, Listed, ListOptions, ListPage, LossReason, ObjectStoreAdapter, Queryable, TtlAdvice } from '@leasehold/client';

const address: string = process.argv[2] ?? '127.0.0.1:7420';
const client = connect(address, { timeoutMs: 5000, logger: null });
const options: AcquireOptions = { ttlMs: 2000, waitMs: 1000, holder: 'smoke', signal: AbortSignal.timeout(10_000) };
const lease: Lease = await client.acquire(`smoke/${process.pid}`, options);
const fence: bigint = lease.fence;
const unsubscribe: () => void = lease.onLost((reason: LossReason, which: Lease) => console.error(`lost ${which.name}: ${reason}`));
lease.check();
const described: Description = await client.describe(lease.name);
const checked: FenceCheck = await client.checkFence(lease.name, fence);
const page: ListPage = await client.listPage({ prefix: lease.name, pageSize: 10 });
const listOptions: ListOptions = { prefix: lease.name, pageSize: 1 };
const listedFences: bigint[] = [];
for await (const l of client.list(listOptions)) {
  const entry: Listed = l;
  listedFences.push(entry.fence);
}
const listed = page.locks.length === 1 && page.locks[0].holder === 'smoke' && listedFences.length === 1 && listedFences[0] === fence;
let busy = '';
let heldBy: string | undefined;
let retryAfterMs: number | null = null;
try {
  await client.acquire(lease.name, { ttlMs: 2000 });
} catch (err) {
  if (err instanceof NotAcquired && err.code === status.ABORTED && err.reason === 'LOCK_HELD') {
    busy = err.details;
    heldBy = err.metadata.holder;
    retryAfterMs = err.retryAfterMs;
  } else throw err;
}
unsubscribe();
await lease.release();
let afterRelease: LossReason | undefined;
try {
  lease.check();
} catch (err) {
  if (err instanceof LeaseLost) afterRelease = err.reason;
}
// Released at the end of its block.
let scoped: Lease | undefined;
{
  await using held = await client.acquire(`smoke-using/${process.pid}`, { ttlMs: 2000 });
  scoped = held;
}
const scopedReleased = scoped.released && !(await client.describe(scoped.name)).held;
await client.close();
console.log(JSON.stringify({ fence: String(fence), held: described.held, current: checked.current, busy: busy !== '' && heldBy === 'smoke' && retryAfterMs !== null, afterRelease, scopedReleased, listed }));

// Never called: misuses the types must refuse.
export function misuses(lease: Lease): void {
  // @ts-expect-error: the fence is read-only
  lease.fence = 1n;
  // @ts-expect-error: durations are ttlMs/waitMs, in milliseconds
  void client.acquire('x', { ttl: 10 });
  // @ts-expect-error: a fence is a bigint, not a number
  const wrong: number = lease.fence;
  void wrong;
  // @ts-expect-error: the page size is pageSize
  void client.listPage({ page_size: 10 });
  // @ts-expect-error: 'auto' is the one word ttlMs takes
  void client.acquire('x', { ttlMs: 'fast' });
  // @ts-expect-error: a write through the guard carries its fence
  void guardedUpdate(db, { table: 't', key: { id: 1 }, set: { v: 1 } });
}

// Never called: the TTL advice, an auto TTL and the fence guards, typed.
export async function guarded(db: Queryable, store: ObjectStoreAdapter<Buffer>): Promise<void> {
  const auto: Lease = await client.acquire('auto', { ttlMs: 'auto' });
  const advice: TtlAdvice | null = client.ttlAdvice;
  const ttl: number = advice?.suggestedTtlMs ?? auto.ttlMs;
  try {
    await guardedUpdate(db, { table: ['billing', 'accounts'], key: { id: 1 }, set: { balance: ttl }, fence: auto.fence });
    await guardedPut(store, 'report.csv', Buffer.from('x'), auto.fence);
  } catch (err) {
    if (err instanceof StaleFenceError) console.error(err.fence, err.currentFence);
  }
}
const db: Queryable = { query: async () => ({ rowCount: 0, rows: [] }) };
