// The errors the client throws. Every error of a failed call carries the gRPC
// status code (`err.code === status.ABORTED`) and the broker's message
// (`err.details`): the broker's messages name the rule or limit involved (who
// holds the lock and for how long, which bound a TTL broke), which is what a
// person reading a log needs.
import { status, type ServiceError } from '@grpc/grpc-js';

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

/** The base class of the client's errors. `code` is the gRPC status code (null for errors found locally). */
export class LeaseholdError extends Error {
  readonly code: status | null;
  readonly details: string;
  constructor(message: string, code: status | null = null, details = '') {
    super(message);
    this.name = 'LeaseholdError';
    this.code = code;
    this.details = details;
  }
}

/**
 * The lock is held by someone else and the wait (if any) ran out: the broker
 * answered ABORTED, and `details` names the current holder and the time left
 * on its lease (or the lock-delay still running).
 */
export class NotAcquired extends LeaseholdError {
  constructor(details: string) {
    super(details || 'the lock is held', status.ABORTED, details);
    this.name = 'NotAcquired';
  }
}

/**
 * The lease is gone: stop acting on it, acquire again if needed. Thrown by
 * `lease.check()`, and by `lease.release()` when the lease was lost before it
 * was released (it ran out while you held it: writes made near the end may
 * have raced with the next holder, which is what fences are for).
 */
export class LeaseLost extends LeaseholdError {
  readonly reason: LossReason;
  constructor(reason: LossReason, message = '', code: status | null = null) {
    super(`the lease was lost: ${reason}${message ? ` (${message})` : ''}`, code, message);
    this.name = 'LeaseLost';
    this.reason = reason;
  }
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
 * What a broker says when its graceful shutdown (SIGTERM) ends a call: it is
 * going away, and another replica can serve the call (the broker's
 * Leases::begin_shutdown).
 */
const SHUTTING_DOWN = 'the broker is shutting down';

/** Whether the broker ended the call because it is shutting down (UNAVAILABLE, saying so). */
export function shuttingDown(err: unknown): boolean {
  return err instanceof LeaseholdError && err.code === status.UNAVAILABLE && err.details.includes(SHUTTING_DOWN);
}

/** Turns a failed call into the matching error. */
export function fromServiceError(err: ServiceError): LeaseholdError {
  const place = err.metadata?.get('leasehold-place')[0];
  return fromStatus(err.code, err.details, typeof place === 'string' ? place : undefined);
}

/**
 * The error of a call that failed with `code` and the broker's message, and
 * the place it kept in line if any: a unary call's status (its
 * `leasehold-place` metadata), or a Session request's SessionError (its
 * `place`), the same error either way.
 */
export function fromStatus(code: number, details: string, place?: string): LeaseholdError {
  const name = status[code] ?? 'UNKNOWN';
  const error = code === status.ABORTED ? new NotAcquired(details) : new LeaseholdError(`${name}: ${details}`, code, details);
  if (place) keptPlaces.set(error, place);
  return error;
}

/** The error an aborted wait rejects with: the signal's reason, as Node's own APIs do. */
export function abortError(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError');
}

/** The first 4 characters of a secret, as the broker logs it: enough to tell leases apart. */
export function redact(token: string): string {
  return `${token.slice(0, 4)}…`;
}
