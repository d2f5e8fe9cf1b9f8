// The Session stream: one long-lived bidi stream per client that carries
// Acquire, Renew, Release and heartbeats as requests with ids of the client's
// choosing, answered in any order, each exactly once (the proto's Session).
// A request on an open stream costs the broker about half of a unary call.
//
// What each way of failing does (tests: test/session.test.mjs):
// - The broker does not serve Session (UNIMPLEMENTED before any answer: an
//   older broker). It processed nothing: the requests reject with NoSession,
//   which the client turns into unary calls; that replica gets unary calls
//   and a KeepAlive stream for a while (UNSUPPORTED_FOR_MS), then is asked
//   again (it may have been upgraded).
// - The stream could not connect (refused, TLS handshake, name resolution):
//   nothing left this process, so each request goes again on a new stream
//   to the next replica, each replica tried once, as Brokers.call does.
// - The broker shuts down (SIGTERM): it answers what it read (a waiting
//   Acquire ends UNAVAILABLE "shutting down", with its place if it kept one:
//   the client's #waiting takes it to the next replica), then ends the
//   stream UNAVAILABLE "shutting down". Requests it had not read when it
//   stopped reading were never served: they go again to the next replica
//   (each replica once); with none left they fail with that status.
// - The stream breaks (the broker was killed, a reset, a lost connection):
//   every request in flight fails with the stream's status (UNAVAILABLE), as
//   a unary call on a broken connection does; the broker cancels them (a
//   waiting Acquire leaves the line, a grant whose answer never left is
//   released). The next request opens a new stream, which moves on to the
//   next replica if this one cannot be reached.
// - The broker answers nothing (stopped, overloaded, a dead connection TCP
//   has not noticed): every request has a deadline, sent as `timeout_ms` and
//   kept here too. Past it the request fails DEADLINE_EXCEEDED and `cancel`
//   is sent; a stream that heard nothing at all since that request was sent
//   is taken for dead and reset, its requests failing UNAVAILABLE.
// - The caller aborts (AbortSignal) or the client closes: `cancel {id}` is
//   sent (the broker ends the wait and gives up the place) and the call
//   rejects at once. A grant already on its way when the cancel arrived is
//   answered anyway: it is handed to `unclaimed` (the client releases it),
//   so nobody holds a lease its caller gave up.
// - Ids: a counter per client, a new id for each send (a request sent again
//   on another stream gets a new one), never reused: the broker's refusal of
//   an id in flight (INVALID_ARGUMENT) cannot happen. Answers to unknown ids
//   are ignored.
// - Idle: a stream with nothing in flight and no lease to keep alive is
//   half-closed after IDLE_MS without an answer (an open stream keeps the
//   process alive, as the KeepAlive stream did only while leases were
//   held). Not at once: a caller that takes and gives back leases now and
//   then kept opening a stream per lease, each costing the broker about what
//   a unary call does.
import type * as grpc from '@grpc/grpc-js';
import { Brokers, markAnswered, notConnected } from './brokers';
import { detailFromMetadata, detailFromSessionError } from './details';
import { LeaseholdError, abortError, fromStatus, shuttingDown, status } from './errors';
import { now } from './lease';

/** The requests a Session stream carries, by the unary call's name. */
export type SessionMethod = 'Acquire' | 'Renew' | 'Release' | 'Heartbeat';

const FIELD: Record<SessionMethod, string> = { Acquire: 'acquire', Renew: 'renew', Release: 'release', Heartbeat: 'heartbeat' };

/**
 * How long a stream with nothing in flight and no lease to keep alive stays
 * open after its last answer: a process that does not close() its client
 * exits at most this long after its last call.
 */
const IDLE_MS = 1_000;

/** How long a replica that answered Session with UNIMPLEMENTED gets unary calls before it is asked again. */
const UNSUPPORTED_FOR_MS = 60_000;

/**
 * The broker does not serve Session (an older broker): the request was not
 * processed; make it as a unary call.
 */
export class NoSession extends Error {
  constructor(readonly target: string) {
    super(`broker ${target} does not serve Session`);
    this.name = 'NoSession';
  }
}

/** What the streams need from the client. */
export interface SessionHooks {
  /** A grant whose caller gave up (aborted, timed out, closed) arrived anyway: release it. */
  unclaimed(lease: any): void;
  /** Whether the client holds leases (the stream stays open to renew them). */
  busy(): boolean;
  /** A stream ended abnormally: heartbeats should resume soon, on a new one. */
  broken(): void;
  debug(message: string): void;
}

interface Request {
  readonly method: SessionMethod;
  readonly body: object;
  readonly timeoutMs: number;
  /** The local deadline, on the now() clock. */
  readonly deadline: number;
  readonly resolve: (answer: Answered) => void;
  readonly reject: (err: unknown) => void;
  /** Streams it may still be sent on, when one could not take it (never connected, shutting down). */
  attempts: number;
  id: number;
  sentAt: number;
  stream: Stream | null;
  /** The caller gave up: the answer, when it comes, is dropped (a grant released). */
  abandoned: boolean;
  timer: NodeJS.Timeout | undefined;
  unlisten: () => void;
}

/** An answer, and the stream it came on (heartbeats are judged per stream: TTL advice). */
export interface Answered {
  readonly res: any;
  /** The stream that answered: the same object for every answer it gives. */
  readonly stream: object;
}

class Stream {
  readonly pending = new Map<number, Request>();
  /**
   * The round trip of this stream's last answered heartbeat (send to
   * answer), in microseconds, sent in its next one (last_round_trip_us):
   * the broker judges the stream's TTLs, and picks auto TTLs, from these.
   * 0 until one is answered.
   */
  lastRoundTripUs = 0;
  /** Takes new requests (the one in use). */
  open = true;
  /** Half-closed: nothing more can be sent, not even a cancel. */
  halfClosed = false;
  ended = false;
  /** Whether any answer arrived, and when the last one did. */
  heard = false;
  heardAt = 0;
  constructor(readonly call: grpc.ClientDuplexStream<any, any>, readonly index: number, readonly target: string) {}
}

/** The Session streams of one client: one in use at a time (older ones finish their requests). */
export class Sessions {
  readonly #brokers: Brokers;
  readonly #hooks: SessionHooks;
  readonly #streams = new Set<Stream>();
  /** Replicas that answered UNIMPLEMENTED, until when they get unary calls. */
  readonly #unsupported = new Map<number, number>();
  readonly #changes = new Set<() => void>();
  #current: Stream | null = null;
  #ids = 0;
  #idleCheck: NodeJS.Timeout | null = null;
  /** When the last answer arrived (the idle time counts from it). */
  #lastAnswer = 0;
  #closed = false;
  /** The rejections of the requests close() cancelled, delivered as it returns. */
  #cancelled: (() => void)[] = [];

  constructor(brokers: Brokers, hooks: SessionHooks) {
    this.#brokers = brokers;
    this.#hooks = hooks;
  }

  /** Whether requests to the replica in use now go on a Session stream (false: an older broker, for now). */
  get supported(): boolean {
    const index = this.#brokers.current().index;
    const until = this.#unsupported.get(index);
    if (until === undefined) return true;
    if (now() < until) return false;
    this.#unsupported.delete(index);
    return true;
  }

  /**
   * Sends one request and resolves with its answer (the unary call's
   * response message). Rejects with the LeaseholdError the unary call would
   * have failed with, with the signal's reason once `signal` aborts, or with
   * NoSession (nothing was done: make it a unary call).
   */
  async request(method: SessionMethod, body: object, timeoutMs: number, signal?: AbortSignal): Promise<any> {
    return (await this.requestOn(method, body, timeoutMs, signal)).res;
  }

  /** As request(), with the stream that answered. */
  requestOn(method: SessionMethod, body: object, timeoutMs: number, signal?: AbortSignal): Promise<Answered> {
    return new Promise((resolve, reject) => {
      if (this.#closed) return reject(new LeaseholdError(`${method} cancelled: the client is closed`));
      if (signal?.aborted) return reject(abortError(signal));
      const r: Request = {
        method, body, timeoutMs, resolve, reject,
        deadline: now() + timeoutMs,
        attempts: this.#brokers.size,
        id: 0, sentAt: 0, stream: null, abandoned: false, timer: undefined, unlisten: () => {},
      };
      if (signal) {
        const onAbort = () => this.#abandon(r, abortError(signal));
        signal.addEventListener('abort', onAbort, { once: true });
        r.unlisten = () => signal.removeEventListener('abort', onAbort);
      }
      r.timer = setTimeout(() => this.#expire(r), timeoutMs);
      this.#send(r);
    });
  }

  /**
   * Cancels every request in flight (close()): the broker is told now, and
   * each rejects with "the client is closed" when close() returns, as a
   * unary call cancelled by close() does (after it, not during the waits of
   * close(), where a caller that awaits close() first would not catch it).
   */
  cancelAll(): void {
    for (const s of this.#streams) {
      for (const r of [...s.pending.values()]) {
        if (r.abandoned) continue;
        this.#abandon(r, null);
        this.#cancelled.push(() => r.reject(new LeaseholdError(`${r.method} cancelled: the client is closed`)));
      }
    }
  }

  /**
   * Half-closes the stream in use if nothing is in flight, no lease needs it
   * and nothing was answered for IDLE_MS (else looks again then): an open
   * stream keeps the process alive.
   */
  idle(): void {
    const s = this.#current;
    if (!s || s.pending.size > 0 || this.#hooks.busy()) return;
    const left = this.#lastAnswer + IDLE_MS - now();
    if (left > 0) return this.#idleIn(left);
    this.#retire(s);
  }

  /**
   * The end (close()): waits (at most `timeoutMs`) for the answers still
   * due, the late grants of cancelled requests among them (released as they
   * come), then half-closes the streams and waits for their end, resetting
   * those that do not end in time.
   */
  async close(timeoutMs: number): Promise<void> {
    const end = now() + timeoutMs;
    await this.#until(() => [...this.#streams].every((s) => s.pending.size === 0), end);
    this.#closed = true;
    if (this.#idleCheck) clearTimeout(this.#idleCheck);
    for (const s of this.#streams) this.#retire(s);
    await this.#until(() => this.#streams.size === 0, end);
    for (const s of [...this.#streams]) this.#reset(s, 'the client is closed');
    for (const reject of this.#cancelled.splice(0)) reject();
  }

  // -- sending ---------------------------------------------------------------

  #send(r: Request): void {
    const s = this.#open();
    r.id = ++this.#ids;
    r.sentAt = now();
    r.stream = s;
    s.pending.set(r.id, r);
    // The broker's bound is what is left of the local one.
    const timeout = Math.max(1, Math.ceil(r.deadline - r.sentAt));
    // A heartbeat carries the round trip of this stream's previous one (a
    // heartbeat sent again on a new stream, that stream's).
    const body = r.method === 'Heartbeat' ? { ...r.body, last_round_trip_us: s.lastRoundTripUs } : r.body;
    s.call.write({ id: r.id, timeout_ms: timeout, [FIELD[r.method]]: body });
  }

  /** The stream to the replica in use, opened if needed. */
  #open(): Stream {
    const { index, stub } = this.#brokers.current();
    const current = this.#current;
    if (current?.open && current.index === index) return current;
    // The client moved on to another replica: the old stream finishes what it carries.
    if (current?.open) this.#retire(current);
    const target = this.#brokers.targets[index];
    const s = new Stream(stub.Session(this.#brokers.metadata()), index, target);
    this.#streams.add(s);
    this.#current = s;
    s.call.on('data', (res: any) => this.#answer(s, res));
    s.call.on('error', () => {}); // reported through 'status' as well
    s.call.on('status', (st: grpc.StatusObject) => this.#ended(s, st));
    this.#hooks.debug(`Session stream to ${target} opened`);
    return s;
  }

  /**
   * Takes no more requests on `s`, and half-closes it once its requests in
   * flight are answered (until then a cancel can still reach them); the
   * broker then ends it with OK.
   */
  #retire(s: Stream): void {
    if (this.#current === s) this.#current = null;
    s.open = false;
    if (s.pending.size === 0 && !s.halfClosed && !s.ended) {
      s.halfClosed = true;
      s.call.end();
    }
  }

  /** Ends `s` from this side (a stall, a close that took too long): its requests fail UNAVAILABLE. */
  #reset(s: Stream, why: string): void {
    if (s.ended) return;
    this.#forget(s);
    this.#hooks.debug(`Session stream to ${s.target} reset: ${why}`);
    for (const r of this.#take(s)) this.#fail(r, new LeaseholdError(`UNAVAILABLE: ${why}`, status.UNAVAILABLE, why));
    s.call.cancel();
    this.#hooks.broken();
  }

  #forget(s: Stream): void {
    s.ended = true;
    s.open = false;
    s.halfClosed = true;
    if (this.#current === s) this.#current = null;
    this.#streams.delete(s);
    this.#changed();
  }

  /** The requests `s` carried that a caller still waits for (the others are forgotten). */
  #take(s: Stream): Request[] {
    const waiting = [...s.pending.values()].filter((r) => !r.abandoned);
    s.pending.clear();
    return waiting;
  }

  // -- answers ---------------------------------------------------------------

  #answer(s: Stream, res: any): void {
    s.heard = true;
    s.heardAt = now();
    const id = Number(res.id);
    const r = s.pending.get(id);
    if (!r) return;
    s.pending.delete(id);
    if (r.abandoned) {
      if (res.acquire?.lease) this.#hooks.unclaimed(res.acquire.lease);
    } else if (res.error) {
      const error = fromStatus(res.error.code, res.error.message, res.error.place, detailFromSessionError(res.error));
      markAnswered(error, s.index);
      this.#fail(r, error);
    } else {
      if (r.method === 'Heartbeat') s.lastRoundTripUs = Math.max(1, Math.round((now() - r.sentAt) * 1000));
      this.#settle(r);
      r.resolve({ res: res[FIELD[r.method]] ?? {}, stream: s });
    }
    if (!s.open) this.#retire(s); // a stream no longer in use ends with its last answer
    this.#changed();
    this.#idleSoon();
  }

  #ended(s: Stream, st: grpc.StatusObject): void {
    if (s.ended) return;
    this.#forget(s);
    const waiting = this.#take(s);
    if (st.code === status.OK && waiting.length === 0) return;
    this.#hooks.debug(`Session stream to ${s.target} ended: ${status[st.code]} ${st.details}`);
    if (st.code === status.UNIMPLEMENTED && !s.heard) {
      // An older broker: nothing was done; these go as unary calls.
      this.#unsupported.set(s.index, now() + UNSUPPORTED_FOR_MS);
      this.#hooks.debug(`broker ${s.target} does not serve Session: unary calls and a KeepAlive stream there`);
      for (const r of waiting) this.#fail(r, new NoSession(s.target));
      this.#hooks.broken();
      return;
    }
    const error = st.code === status.OK
      ? new LeaseholdError('UNAVAILABLE: the broker ended the Session stream before answering', status.UNAVAILABLE, 'the broker ended the Session stream before answering')
      : fromStatus(st.code, st.details, undefined, detailFromMetadata(st.metadata));
    markAnswered(error, s.index);
    // Requests that never reached a broker that would serve them go to the next replica.
    const unsent = notConnected(st);
    const down = shuttingDown(error);
    if (unsent) this.#brokers.unreachable(s.index);
    else if (down) this.#brokers.moveOn(s.index, 'shutting down');
    for (const r of waiting) {
      if ((unsent || down) && r.attempts > 1 && !this.#closed) {
        r.attempts -= 1;
        this.#send(r);
      } else {
        this.#fail(r, error);
      }
    }
    if (st.code !== status.OK) this.#hooks.broken();
  }

  /** The local deadline passed: fail the request, and reset a stream that heard nothing since it was sent. */
  #expire(r: Request): void {
    // Answers that arrived meanwhile are read first (a loaded event loop
    // can run a timer before the I/O that was due before it).
    setImmediate(() => {
      const s = r.stream;
      if (r.abandoned || !s || s.pending.get(r.id) !== r) return;
      this.#abandon(r, new LeaseholdError(`DEADLINE_EXCEEDED: no answer to ${r.method} within ${r.timeoutMs} ms`, status.DEADLINE_EXCEEDED,
        `no answer to ${r.method} within ${r.timeoutMs} ms`));
      if (!s.ended && s.heardAt < r.sentAt) this.#reset(s, `the Session stream to ${s.target} answered nothing for ${Math.round(now() - r.sentAt)} ms`);
    });
  }

  /** The caller gives up on `r`: the broker is told to end it, the caller gets `err` now (null: later). */
  #abandon(r: Request, err: unknown): void {
    if (r.abandoned) return;
    r.abandoned = true;
    const s = r.stream;
    if (s && !s.halfClosed && s.pending.get(r.id) === r) s.call.write({ id: ++this.#ids, cancel: { id: r.id } });
    this.#settle(r);
    if (err !== null) r.reject(err);
  }

  #fail(r: Request, err: unknown): void {
    this.#settle(r);
    r.reject(err);
  }

  #settle(r: Request): void {
    clearTimeout(r.timer);
    r.unlisten();
  }

  // -- bookkeeping -----------------------------------------------------------

  /** After an answer: the stream may be idle from now (its callers may yet add a lease). */
  #idleSoon(): void {
    this.#lastAnswer = now();
    this.#idleIn(IDLE_MS);
  }

  #idleIn(ms: number): void {
    if (this.#idleCheck || this.#closed) return;
    this.#idleCheck = setTimeout(() => {
      this.#idleCheck = null;
      this.idle();
    }, ms);
    // The open stream keeps the process alive until then, not this timer.
    this.#idleCheck.unref();
  }

  #changed(): void {
    for (const wake of [...this.#changes]) wake();
  }

  /** Resolves once `condition()` holds (checked at each answer and stream end) or at `end`. */
  async #until(condition: () => boolean, end: number): Promise<void> {
    while (!condition() && now() < end) {
      await new Promise<void>((resolve) => {
        const wake = () => { clearTimeout(timer); this.#changes.delete(wake); resolve(); };
        const timer = setTimeout(wake, Math.max(0, end - now()));
        this.#changes.add(wake);
      });
    }
  }
}
