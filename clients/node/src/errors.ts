// The errors the client throws. Every error of a failed call carries the gRPC
// status code (`err.code === status.ABORTED`), the broker's message
// (`err.details`, for people: it says what is wrong and names the limit and
// the broker flag involved) and, for programs, what the broker's status
// details say (details.ts): a stable `reason` code, its `metadata` (the
// holder, the time left, the limit...) and `retryAfterMs`. The client reads
// refusals from those, never from the message.
import { status, type ServiceError } from '@grpc/grpc-js';
import { NO_DETAIL, detailFromMetadata, type Detail } from './details';

export { status };

/**
 * Why a lease was lost.
 *
 * - `EXPIRED`: the broker found the lease expired.
 * - `NOT_OWNER`: it expired and the lock was granted to another owner since.
 * - `STORE_LOST`: the store lost it before its TTL could have run out (Redis
 *   restarted empty or was flushed, a memory-store broker restarted).
 * - `REVOKED`: an operator revoked it.
 * - `DEADLINE_PASSED`: no renewal confirmed it before its local deadline (the
 *   broker was unreachable, or this process was stalled). The broker may not
 *   have expired it yet, but it could at any moment, so it counts as lost.
 * - `RELEASED`: released by this client. Only `lease.check()` and
 *   `lease.signal` report it; lost callbacks never see it (a release is not a loss).
 */
export type LossReason = 'EXPIRED' | 'NOT_OWNER' | 'STORE_LOST' | 'REVOKED' | 'DEADLINE_PASSED' | 'RELEASED';

/**
 * The base class of the client's errors. The message is for people; programs
 * read the fields:
 *
 * - `code`: the gRPC status code (null for errors found locally).
 * - `details`: the broker's message as it sent it (or gRPC's, for a call
 *   that reached no broker).
 * - `reason`: the broker's reason code (`BAD_ARGUMENT`, `LOCK_HELD`,
 *   `LIMIT_REACHED`...: the proto's "Errors" section lists them); '' when no
 *   broker explained the failure. (LeaseLost's is its LossReason.)
 * - `metadata`: the refusal's facts, every value a string, durations in
 *   milliseconds (`{ argument: 'ttl', ttl_ms: '100', min_ttl_ms: '500', ... }`,
 *   `{ holder, remaining_ms, ... }`); empty when none.
 * - `retryAfterMs`: how long to wait before a retry may succeed, when the
 *   broker says (the time left on the lease that holds the lock, a rate cap,
 *   a store that did not answer); else null.
 */
export class LeaseholdError extends Error {
  readonly code: status | null;
  readonly details: string;
  readonly reason: string;
  readonly metadata: Readonly<Record<string, string>>;
  readonly retryAfterMs: number | null;
  constructor(message: string, code: status | null = null, details = '', detail: Detail = NO_DETAIL) {
    super(message);
    this.name = 'LeaseholdError';
    this.code = code;
    this.details = details;
    this.reason = detail.reason;
    this.metadata = Object.freeze({ ...detail.metadata });
    this.retryAfterMs = detail.retryAfterMs;
  }
}

/**
 * The lock is held by someone else and the wait (if any) ran out: the broker
 * answered ABORTED. `reason` is `LOCK_HELD` (`metadata`: holder, fence,
 * remaining_ms, waited_ms; `retryAfterMs` is the time left on its lease),
 * `LOCK_DELAY` (the name is in its lock-delay: remaining_ms; retryAfterMs) or
 * `LINE_AHEAD` (callers queued earlier come first: queued). The message says
 * the same in words.
 */
export class NotAcquired extends LeaseholdError {
  constructor(details: string, detail: Detail = NO_DETAIL) {
    super(details || 'the lock is held', status.ABORTED, details, detail);
    this.name = 'NotAcquired';
  }
}

/**
 * The lease is gone: stop acting on it, acquire again if needed. Thrown by
 * `lease.check()`, and by `lease.release()` when the lease was lost before it
 * was released (it ran out while you held it: writes made near the end may
 * have raced with the next holder, which is what fences are for). `reason`
 * is the LossReason; `metadata` the broker's (name, fence) when a release
 * found the lease gone.
 */
export class LeaseLost extends LeaseholdError {
  declare readonly reason: LossReason;
  constructor(reason: LossReason, message = '', code: status | null = null, metadata: Readonly<Record<string, string>> = {}) {
    super(`the lease was lost: ${reason}${message ? ` (${message})` : ''}`, code, message, { reason, metadata, retryAfterMs: null });
    this.name = 'LeaseLost';
  }
}

/**
 * A failed Release as the error to throw: LeaseLost when the lease was
 * already gone (REVOKED when the broker says an operator revoked it:
 * NOT_FOUND, LEASE_REVOKED; EXPIRED for any other NOT_FOUND; NOT_OWNER for
 * FAILED_PRECONDITION); any other error as it is.
 */
export function releaseError(err: unknown): unknown {
  if (!(err instanceof LeaseholdError)) return err;
  if (err.code === status.NOT_FOUND) {
    return new LeaseLost(err.reason === 'LEASE_REVOKED' ? 'REVOKED' : 'EXPIRED', err.details, err.code, err.metadata);
  }
  if (err.code === status.FAILED_PRECONDITION) return new LeaseLost('NOT_OWNER', err.details, err.code, err.metadata);
  return err;
}

/**
 * The places in line that calls kept (keep_place), by error: kept off the
 * error object itself, since a place is a secret like an owner token (it
 * becomes one when granted) and errors get logged.
 */
const keptPlaces = new WeakMap<LeaseholdError, string>();

/**
 * The place a call kept in line (its `leasehold-place` trailing metadata), if
 * any: an ABORTED call whose wait ran out, or an UNAVAILABLE one that its
 * broker's shutdown ended.
 */
export function keptPlace(err: unknown): string | undefined {
  return err instanceof LeaseholdError ? keptPlaces.get(err) : undefined;
}

/**
 * Whether a broker answered the call UNAVAILABLE (reason UNAVAILABLE in its
 * details): it is shutting down (a graceful shutdown, SIGTERM, ends waiting
 * calls so: the broker's Leases::begin_shutdown), or its store did not
 * answer. Either way another replica can serve the call (the proto's
 * "Errors": safe to retry, on any replica). grpc-js's own UNAVAILABLE (no
 * connection) has no reason: see notConnected.
 */
export function shuttingDown(err: unknown): boolean {
  return err instanceof LeaseholdError && err.code === status.UNAVAILABLE && err.reason === 'UNAVAILABLE';
}

/** Turns a failed call into the matching error. */
export function fromServiceError(err: ServiceError): LeaseholdError {
  const place = err.metadata?.get('leasehold-place')[0];
  return fromStatus(err.code, err.details, typeof place === 'string' ? place : undefined, detailFromMetadata(err.metadata));
}

/**
 * The error of a call that failed with `code` and the broker's message, the
 * place it kept in line if any, and what its details say: a unary call's
 * status (its `leasehold-place` metadata, its `grpc-status-details-bin`),
 * or a Session request's SessionError (its `place`, `reason`, `metadata`,
 * `retry_delay_ms`), the same error either way.
 */
export function fromStatus(code: number, details: string, place?: string, detail: Detail = NO_DETAIL): LeaseholdError {
  const error = code === status.ABORTED ? new NotAcquired(details, detail) : new LeaseholdError(message(code, details, detail), code, details, detail);
  if (place) keptPlaces.set(error, place);
  return error;
}

/**
 * The message of a failed call, for people: the broker's as it is (a
 * refusal with a reason); gRPC's, cleaned, for a call that could not
 * connect; else the code's name and the text.
 */
function message(code: number, details: string, detail: Detail): string {
  if (detail.reason) return details;
  const failure = connectionFailure(code, details);
  if (failure !== null) return failure;
  const name = status[code] ?? 'UNKNOWN';
  // grpc-js's own words for its deadline ("Deadline exceeded after 10.002s,LB
  // pick: 0.000s,remote_addr=..."): they only repeat the code.
  if (code === status.DEADLINE_EXCEEDED && details.toLowerCase().startsWith('deadline exceeded')) {
    return "DEADLINE_EXCEEDED: no answer from the broker within the call's timeout";
  }
  return details ? `${name}: ${details}` : name;
}

// What grpc-js says when a call failed before anything was sent: no
// connection could be made (refused, TLS handshake failed, timed out), or the
// name did not resolve. grpc-js's own words, never a broker's (a broker's
// refusals are read from their details).
const NO_CONNECTION = 'No connection established';
const NO_NAME = 'Name resolution failed';

/** Whether a call failed because no connection to the broker could be made (so the request was never sent). */
export function notConnectedStatus(code: number | undefined, details: string | undefined): boolean {
  const text = details ?? '';
  return code === status.UNAVAILABLE && (text.includes(NO_CONNECTION) || text.includes(NO_NAME));
}

/**
 * The message of a call that could not connect, or null for any other
 * failure. grpc-js puts its own words around the cause ("No connection
 * established. Last error: Error: connect ECONNREFUSED 127.0.0.1:1.
 * Resolution note: "): the cause alone is kept ("could not connect to the
 * broker: connect ECONNREFUSED 127.0.0.1:1"); `details` keeps all of it.
 */
function connectionFailure(code: number, details: string): string | null {
  if (!notConnectedStatus(code, details)) return null;
  let cause = details;
  const last = cause.indexOf('Last error: ');
  if (last >= 0) cause = cause.slice(last + 'Last error: '.length);
  const note = cause.indexOf('. Resolution note:');
  if (note >= 0) cause = cause.slice(0, note);
  if (cause.startsWith('Error: ')) cause = cause.slice('Error: '.length);
  cause = cause.trim();
  if (cause.endsWith('.')) cause = cause.slice(0, -1);
  return cause ? `could not connect to the broker: ${cause}` : 'could not connect to the broker';
}

/**
 * The client's name of each argument the broker names in a BAD_ARGUMENT
 * refusal (its metadata `argument`); absent: not one of the caller's
 * (place, request).
 */
const PARAMETERS: Record<string, string> = {
  name: 'name',
  ttl: 'ttlMs',
  wait: 'waitMs',
  lock_delay: 'lockDelayMs',
  limit: 'limit',
  holder: 'holder',
  owner_token: 'ownerToken',
  value: 'value',
  election: 'election',
  tenant: 'tenant',
  prefix: 'prefix',
  page_size: 'pageSize',
  page_token: 'pageToken',
};

/** The metadata key of the value sent, for arguments that are durations (in milliseconds, as the client's). */
const SENT: Record<string, string> = { ttl: 'ttl_ms', wait: 'wait_ms', lock_delay: 'lock_delay_ms', limit: 'limit' };

/** Longest string shown whole in a message. */
const SHOWN = 40;

/**
 * `err` in the caller's words: a BAD_ARGUMENT refusal names the client's
 * own parameter and the value given (`ttlMs=100: a TTL of 100 ms is below
 * this broker's minimum of 500 ms (--ttl-min)`); other errors as they are.
 * `given`: the caller's arguments, by the broker's name of each (ttl,
 * holder...). Never shows an owner token.
 */
export function inCallerWords(err: unknown, given: Readonly<Record<string, unknown>> = {}): unknown {
  if (!(err instanceof LeaseholdError) || err.reason !== 'BAD_ARGUMENT' || err instanceof LeaseLost) return err;
  const argument = err.metadata.argument ?? '';
  const parameter = PARAMETERS[argument];
  if (!parameter) return err;
  let shown: string | null = null;
  if (argument !== 'owner_token') {
    if (given[argument] !== undefined) {
      const value = given[argument];
      shown = typeof value === 'string'
        ? JSON.stringify(value.length <= SHOWN ? value : `${value.slice(0, SHOWN / 2)}…`)
        : String(value);
    } else if (SENT[argument] && err.metadata[SENT[argument]] !== undefined) {
      shown = err.metadata[SENT[argument]];
    }
  }
  const text = `${parameter}${shown === null ? '' : `=${shown}`}: ${err.details}`;
  const named = new LeaseholdError(text, err.code, err.details, { reason: err.reason, metadata: err.metadata, retryAfterMs: err.retryAfterMs });
  const place = keptPlaces.get(err);
  if (place) keptPlaces.set(named, place);
  return named;
}

/**
 * The broker's --max-wait in milliseconds from its refusal of a longer wait:
 * INVALID_ARGUMENT, BAD_ARGUMENT, `argument` wait, with `max_wait_ms`; null
 * for any other error (a broker from before error details included: its
 * refusal then reaches the caller).
 */
export function maxWaitFrom(err: LeaseholdError): number | null {
  if (err.code !== status.INVALID_ARGUMENT || err.reason !== 'BAD_ARGUMENT' || err.metadata.argument !== 'wait') return null;
  const ms = Number(err.metadata.max_wait_ms ?? '');
  return Number.isSafeInteger(ms) && ms > 0 ? ms : null;
}

/**
 * Whether a Session stream refused an Acquire because it holds
 * --max-stream-leases leases (LIMIT_REACHED, `limit` max-stream-leases): a
 * unary Acquire is not bound by that.
 */
export function streamFull(err: unknown): boolean {
  return err instanceof LeaseholdError && err.reason === 'LIMIT_REACHED' && err.metadata.limit === 'max-stream-leases';
}

/** The error an aborted wait rejects with: the signal's reason, as Node's own APIs do. */
export function abortError(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError');
}

/** The first 4 characters of a secret, as the broker logs it: enough to tell leases apart. */
export function redact(token: string): string {
  return `${token.slice(0, 4)}…`;
}
