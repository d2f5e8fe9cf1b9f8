// A held lease: its local deadline, its loss, and what the application sees.
import { inspect } from 'node:util';
import { LeaseLost, redact, type LossReason } from './errors';

/** Called once when a lease is lost (never for a release). */
export type LostCallback = (reason: LossReason, lease: Lease) => void;

/** What a lease needs from the client that keeps it alive. @internal */
export interface Keeper {
  lose(lease: Lease, reason: LossReason, message: string): void;
  release(lease: Lease): Promise<void>;
  warn(message: string): void;
}

/** The margin of a lease of `ttlMs`: the one asked for (at most the TTL), else a tenth of the TTL. */
function marginFor(ttlMs: number, asked: number | undefined): number {
  return asked === undefined ? ttlMs / 10 : Math.min(asked, ttlMs);
}

/** The clock of every deadline: monotonic, so wall-clock steps cannot move them. */
export const now = (): number => performance.now();

/**
 * A held lease, renewed in the background by its client until it is released
 * or lost.
 *
 * Attach `fence` to every write made under the lease and have the storage
 * refuse writes with a lower fence than one it already accepted: a lease alone
 * cannot stop a holder that was paused past its TTL, a fence checked by the
 * storage can. Call `check()` right before each write (or pass `signal` to
 * the work done under the lease), so that a lease known to be lost stops the
 * write before it happens.
 */
export class Lease {
  /** The lock name. */
  readonly name: string;
  /**
   * The fencing token: strictly greater than the fence of every earlier grant
   * of this name. A BigInt (it is a uint64): compare fences, never subtract
   * them (they are not dense).
   */
  readonly fence: bigint;
  /**
   * Whether the broker chooses the TTL (`ttlMs: 'auto'`): each heartbeat
   * asks for the TTL fit for the stream's measured latency, so `ttlMs` can
   * change at every renewal.
   */
  readonly ttlAuto: boolean;
  /** How long the Acquire call waited for the lock, in milliseconds. */
  readonly waitedMs: number;
  /**
   * Resolves with the reason once the lease is lost (as soon as the broker
   * says so, or when the local deadline passes without a confirmed renewal).
   * A release is not a loss: after `release()` it stays pending.
   */
  readonly lost: Promise<LossReason>;

  readonly #token: string;
  readonly #keeper: Keeper;
  readonly #controller = new AbortController();
  #deadline: number;
  #ttlMs: number;
  #marginMs: number;
  /** The margin the caller asked for; undefined: a tenth of the TTL, whatever the TTL becomes. */
  readonly #marginAsked: number | undefined;
  #reason: LossReason | null = null;
  #message = '';
  #released = false;
  #callbacks: LostCallback[] = [];
  #timer: NodeJS.Timeout | undefined;
  #resolveLost!: (reason: LossReason) => void;

  /** @internal Made by Client.acquire and Client.campaign. */
  constructor(keeper: Keeper, name: string, token: string, fence: bigint, ttlMs: number, marginAsked: number | undefined, waitedMs: number, sent: number, ttlAuto: boolean) {
    this.#keeper = keeper;
    this.#token = token;
    this.name = name;
    this.fence = fence;
    this.ttlAuto = ttlAuto;
    this.#ttlMs = ttlMs;
    this.#marginAsked = marginAsked;
    this.#marginMs = marginFor(ttlMs, marginAsked);
    this.waitedMs = waitedMs;
    // The grant happened no sooner than waited_ms after the request was
    // sent, and the store counts the TTL from then.
    this.#deadline = sent + waitedMs + ttlMs - this.#marginMs;
    this.lost = new Promise((resolve) => (this.#resolveLost = resolve));
    this.#armDeadline();
  }

  /**
   * The TTL the broker applied, in milliseconds (which counts, not the one
   * asked for). For an auto lease (`ttlAuto`), the TTL of its last renewal:
   * it follows the latency the broker measures.
   */
  get ttlMs(): number { return this.#ttlMs; }

  /**
   * How long before the broker could expire the lease it counts as lost
   * here, in milliseconds: the `marginMs` asked for (at most the TTL), else
   * a tenth of the TTL.
   */
  get marginMs(): number { return this.#marginMs; }

  /** The secret that proves ownership (32 hex characters). A password: do not log it. */
  get ownerToken(): string { return this.#token; }

  /**
   * The local deadline, on the `performance.now()` clock: the lease is valid
   * at least until then unless the broker says it is lost. It counts from the
   * time each request was *sent*, less `marginMs`, so latency and clock skew
   * can only make it early. Each confirmed renewal moves it forward.
   */
  get deadline(): number { return this.#deadline; }

  /** Why the lease was lost, or null while it is held (and after a release). */
  get lostReason(): LossReason | null { return this.#released ? null : this.#reason; }

  /** Whether `release()` was called. */
  get released(): boolean { return this.#released; }

  /**
   * Aborted once the lease can no longer be relied on: lost (its reason is a
   * LeaseLost with the loss reason) or released (reason RELEASED). Pass it to
   * the work done under the lease (fetch, streams, timers/promises).
   */
  get signal(): AbortSignal { return this.#controller.signal; }

  /** True once the lease can no longer be relied on: lost, past its local deadline, or released. */
  isLost(): boolean {
    return this.#released || this.#reason !== null || now() >= this.#deadline;
  }

  /** Throws LeaseLost if the lease is lost or released. Call it right before each write. */
  check(): void {
    if (this.#released) throw new LeaseLost('RELEASED');
    if (this.#reason) throw new LeaseLost(this.#reason, this.#message);
    if (now() >= this.#deadline) throw new LeaseLost('DEADLINE_PASSED', 'no renewal was confirmed before the local deadline');
  }

  /**
   * Calls `callback(reason, lease)` once, when the lease is lost. If it is
   * lost already, the callback runs soon (in a microtask), never
   * synchronously. A release is not a loss: callbacks do not run for it. An
   * error thrown by a callback is reported (as a warning) and does not stop
   * the others. Returns a function that removes the callback.
   */
  onLost(callback: LostCallback): () => void {
    if (typeof callback !== 'function') throw new TypeError('onLost takes a function');
    if (this.#released) return () => {};
    if (this.#reason) {
      const reason = this.#reason;
      queueMicrotask(() => this.#run(callback, reason));
      return () => {};
    }
    this.#callbacks.push(callback);
    return () => { this.#callbacks = this.#callbacks.filter((c) => c !== callback); };
  }

  /**
   * Stops renewing the lease and releases it, waking the next waiter.
   * Rejects with LeaseLost if the lease was lost before: then it ran out while
   * you held it (and it stays lost). Calling it again after a release does
   * nothing.
   */
  async release(): Promise<void> {
    if (this.#released) return;
    // Lost, it stays lost (and reported as such). Lost by deadline, it may
    // still exist on the broker: the client released it in the background
    // when it noticed.
    if (this.#reason) throw new LeaseLost(this.#reason, this.#message);
    this.#released = true;
    clearTimeout(this.#timer);
    this.#callbacks = [];
    this.#controller.abort(new LeaseLost('RELEASED'));
    await this.#keeper.release(this);
  }

  /**
   * For `await using lease = await client.acquire(...)` (TypeScript 5.2+):
   * the lease is released at the end of the block, and a lease lost before
   * rejects with LeaseLost there.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  /** What printing or logging a lease shows: the token's first 4 characters only. */
  toString(): string {
    const state = this.#released ? 'released' : this.#reason ? `lost: ${this.#reason}` : 'held';
    return `Lease { name: ${this.name}, fence: ${this.fence}, token: ${redact(this.#token)}, state: ${state} }`;
  }
  [inspect.custom](): string { return this.toString(); }
  toJSON(): object {
    return { name: this.name, fence: String(this.fence), token: redact(this.#token), lostReason: this.lostReason, released: this.#released };
  }

  /**
   * @internal Records a renewal the broker confirmed for a heartbeat sent at
   * `sent`, for `ttlMs` (the TTL the store applied). While the TTL stays the
   * same the deadline only moves forward, and a lease whose deadline passed
   * stays lost: the application may have seen it lost and must not see it
   * come back. A new TTL (an auto lease whose suggested TTL changed) sets
   * the deadline from this renewal even if that moves it back: the broker
   * now expires the lease that much earlier.
   */
  _renewed(sent: number, ttlMs: number): void {
    if (this.#reason || this.#released || now() >= this.#deadline) return;
    if (ttlMs > 0 && ttlMs !== this.#ttlMs) {
      this.#ttlMs = ttlMs;
      this.#marginMs = marginFor(ttlMs, this.#marginAsked);
      this.#deadline = sent + ttlMs - this.#marginMs;
      this.#armDeadline(); // a deadline already passed is reported by the timer, at once
      return;
    }
    const deadline = sent + ttlMs - this.#marginMs;
    if (deadline > this.#deadline) {
      this.#deadline = deadline;
      this.#armDeadline();
    }
  }

  /** @internal Records the loss (the first reason wins); false if it was already lost or released. */
  _markLost(reason: LossReason, message: string): boolean {
    clearTimeout(this.#timer);
    if (this.#reason || this.#released) return false;
    this.#reason = reason;
    this.#message = message;
    const callbacks = this.#callbacks;
    this.#callbacks = [];
    this.#controller.abort(new LeaseLost(reason, message));
    this.#resolveLost(reason);
    for (const callback of callbacks) this.#run(callback, reason);
    return true;
  }

  #run(callback: LostCallback, reason: LossReason): void {
    try {
      callback(reason, this);
    } catch (err) {
      this.#keeper.warn(`a lost callback of lease ${this.name} threw: ${err instanceof Error ? err.stack ?? err.message : String(err)}`);
    }
  }

  // A timer at the local deadline reports the loss on time even if no
  // heartbeat answer (nor error) ever arrives. Unref'd: the client's stream,
  // not this timer, is what keeps a process holding leases alive.
  #armDeadline(): void {
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      if (now() < this.#deadline) return this.#armDeadline(); // timers may fire a little early
      this.#keeper.lose(this, 'DEADLINE_PASSED', 'no renewal was confirmed before the local deadline');
    }, Math.max(0, this.#deadline - now()));
    this.#timer.unref();
  }
}
