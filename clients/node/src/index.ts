// Leasehold's Node.js client: leases with fencing tokens, kept alive over one
// stream per client (Session, or KeepAlive beside unary calls). See README.md
// for the rules it follows.
export { Client, Observation, connect, defaultHolder } from './client';
export type { AcquireOptions, CampaignOptions, ConnectOptions, Description, Fence, FenceCheck, Leader, ListOptions, ListPage, ListPageOptions, Listed, Logger, Pem, TtlAdvice } from './client';
export { Lease } from './lease';
export type { LostCallback } from './lease';
export { LeaseholdError, LeaseLost, NotAcquired, status } from './errors';
export type { LossReason } from './errors';
export { PROTO_DIR } from './brokers';
export { FENCE_COLUMN, GUARDED_PUT_ATTEMPTS, RowNotFoundError, StaleFenceError, fenceMigration, guardedPut, guardedUpdate, guardedUpdateQuery, guardedUpsert, guardedUpsertQuery, quoteIdent } from './fence';
export type { GuardedWrite, ObjectHead, ObjectStoreAdapter, PutPrecondition, Query, Queryable, Table } from './fence';
