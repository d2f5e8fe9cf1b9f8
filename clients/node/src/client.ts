// The Client: Acquire, Release and heartbeats on one Session stream (session.ts)
// by default, or as unary calls and a KeepAlive stream (`session: false`, or a
// broker that does not serve Session); the other calls are unary. The keeper
// renews all its leases over that one stream. It follows the rules of the
// Python and Rust clients:
//
// - one heartbeat every third of the shortest TTL, naming every live lease;
// - each renewal moves a lease's local deadline to (heartbeat *send* time +
//   granted TTL - margin), so latency and clock skew can only make it early;
// - a lease is lost when the broker answers LOST (or REJECTED), or when its
//   local deadline passes without a confirmation (a timer per lease notices
//   on time even if the broker never answers); a lost lease never comes back;
// - one heartbeat at a time on a Session stream (the broker reads nothing
//   more while a second one waits), each with its own deadline;
// - when the stream breaks or stalls, a new one is opened (jittered backoff,
//   never longer than a heartbeat interval) and the leases resumed by owner
//   token, on the next broker replica if this one cannot be reached;
// - a lease past its local deadline is released in the background, so the
//   next holder need not wait for the broker-side TTL;
// - each heartbeat reports the round trip of the stream's previous one, and
//   the broker's TTL advice is warned once per stream (client.ttlAdvice has
//   the latest); an auto lease (ttlMs: 'auto') is renewed for the TTL the
//   broker suggests, and its deadline and the heartbeat interval follow;
// - owner tokens and the bearer token are secrets: never logged or printed
//   in full.
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { inspect } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import { Brokers, answeredBy, checkMs, isServiceError, notConnected } from './brokers';
import { LeaseholdError, abortError, fromServiceError, inCallerWords, keptPlace, maxWaitFrom, releaseError, shuttingDown, status, streamFull, type LossReason } from './errors';
import { Lease, now, type Keeper } from './lease';
import { LOSS_REASON, STATE } from './names';
import { NoSession, Sessions, type SessionMethod } from './session';

/** The broker's default --max-wait, assumed until a refusal says otherwise (its `max_wait_ms`). */
const DEFAULT_MAX_WAIT_MS = 300_000;

/**
 * A call answered "shutting down" later than this after it was sent had been
 * waiting on that broker (served until the shutdown), not turned away on
 * arrival by a broker already going: the replica it moves to starts a new
 * round (see #waiting). As the Python client's _SERVED_FOR.
 */
const SERVED_FOR_MS = 1000;

/** Whether a `waitMs` means "as long as it takes". */
function endless(waitMs: number | null | undefined): boolean {
  return waitMs === null || waitMs === Infinity;
}

/** PEM: a Buffer (or Uint8Array) is used as is; a string names a file, read at once. */
export type Pem = string | Uint8Array;

/** Where the client reports lost leases and failovers (warn), and stream restarts (debug, if present). */
export interface Logger {
  warn(message: string): void;
  debug?(message: string): void;
}

export interface ConnectOptions {
  /** TLS trusting the system's roots. Implied by an https:// target, `ca` or `cert`. Default: plaintext. */
  tls?: boolean;
  /** CA certificates (PEM) the broker's certificate must chain to (turns TLS on). */
  ca?: Pem;
  /** This client's certificate (PEM), for a broker with mutual TLS; goes with `key`. */
  cert?: Pem;
  /** This client's private key (PEM); goes with `cert`. */
  key?: Pem;
  /** The name the broker's certificate must carry, if not the target's host. */
  serverName?: string;
  /**
   * A bearer token for a broker with --auth-file, sent as `authorization:
   * Bearer <token>` on every call and on the Session (or KeepAlive) stream. Sent on
   * plaintext channels too (a broker on loopback); elsewhere use TLS.
   */
  token?: string;
  /**
   * Whether Acquire, Release and the heartbeats go on one Session stream (the
   * default: a request on it costs the broker about half of a unary call),
   * or as unary calls and a KeepAlive stream (false). A broker that does not
   * serve Session (an older one) gets unary calls either way.
   */
  session?: boolean;
  /** Ready-made channel credentials instead of tls/ca/cert/key. */
  credentials?: grpc.ChannelCredentials;
  /** How long a unary call may take, in milliseconds, on top of the wait asked for. Default 10 000. */
  timeoutMs?: number;
  /** More grpc-js channel options (they override the client's). */
  channelOptions?: grpc.ChannelOptions;
  /** Default: warnings to console.warn. null: silent. */
  logger?: Logger | null;
  /**
   * Called when the broker first advises on a stream that a TTL is too short
   * for the heartbeat latency it measured (a warning is logged then too):
   * once per stream, not at every heartbeat. `client.ttlAdvice` has the
   * latest advice. An error it throws is reported as a warning.
   */
  onTtlAdvice?: (advice: TtlAdvice) => void;
}

/**
 * The broker's word on a stream's TTLs (KeepAliveResponse.advice): a lease
 * it renewed has a TTL under 10 times the p99 of the stream's heartbeat
 * round trips, so one heartbeat as slow as the slowest eats a tenth of its
 * life and a stall more loses it. Lengthen the TTL, or use `ttlMs: 'auto'`.
 */
export interface TtlAdvice {
  /** The 99th percentile of the stream's last 128 heartbeat round trips, in microseconds. */
  roundTripP99Us: number;
  /** The shortest TTL the heartbeat renewed, in milliseconds. */
  shortestTtlMs: number;
  /** A TTL fit for the latency measured (10 x the p99, at least the broker's --ttl-auto-floor, within its bounds): what `ttlMs: 'auto'` gets. */
  suggestedTtlMs: number;
  /** How many leases of the heartbeat have a TTL under 10 x the p99. */
  leasesBelow: number;
  /** The broker's sentence, for people. */
  message: string;
}

export interface AcquireOptions {
  /**
   * The lease's TTL in milliseconds (within the broker's bounds: 500 ms to 1
   * h unless configured). Default 10 000. `'auto'`: the broker chooses it
   * from the heartbeat latency it measured (10 x the p99 of the round trips,
   * at least its --ttl-auto-floor, 10 s unless configured), and each
   * heartbeat renews the lease for the TTL fit for the latency then:
   * `lease.ttlMs` tells the TTL in force, and the heartbeats and the
   * deadline follow it.
   */
  ttlMs?: number | 'auto';
  /**
   * How long to wait if the lock is held, in milliseconds. 0 (the default)
   * tries once; a try never jumps the queue. `null` (or `Infinity`) waits as
   * long as it takes. A wait past the broker's --max-wait is one call after
   * the other, each waiting in the place in line the previous one kept
   * (keep_place), so nobody who arrived later overtakes it.
   */
  waitMs?: number | null;
  /** The label Describe shows. Default `hostname:pid`. */
  holder?: string;
  /** How long before the computed deadline the lease counts as lost: time for the application to stop writing. Default: a tenth of the TTL. */
  marginMs?: number;
  /** If this lease ends involuntarily (expiry, revocation), nobody gets the lock for this long afterwards. */
  lockDelayMs?: number;
  /** > 1 makes `name` a semaphore with that many permits. */
  limit?: number;
  /** Aborting it cancels the wait: the call leaves the queue at once and rejects with the signal's reason. */
  signal?: AbortSignal;
}

export interface CampaignOptions {
  /** The leadership lease's TTL in milliseconds. Default 10 000. */
  ttlMs?: number;
  /** How long to wait to become the leader, in milliseconds (0: try once; `null` or `Infinity`: as long as it takes, as for acquire). */
  waitMs?: number | null;
  marginMs?: number;
  /** Aborting it cancels the wait. */
  signal?: AbortSignal;
}

/** Who holds a name, as Describe reports it (never the owner token). */
export interface Description {
  held: boolean;
  holder: string;
  fence: bigint;
  remainingMs: number;
  ttlMs: number;
  grantedAtUnixMs: number;
  /** Callers queued for the name on every broker replica. */
  waiters: number;
  /** Callers waiting on the replica that answered. */
  localWaiters: number;
  lockDelayMs: number;
  lockDelayRemainingMs: number;
  permitsHeld: number;
}

/**
 * A name a listing found something on (a lease, permits, waiters, a
 * lock-delay): its state as Describe tells it, with the tenant it belongs
 * to. Never an owner token.
 */
export interface Listed {
  /** The tenant whose name it is (`@root` for the root namespace). */
  tenant: string;
  /** The name, as its holders name it (without the tenant). */
  name: string;
  /** Whether a lock lease holds it (false for a semaphore's permits). */
  held: boolean;
  /** The holder's label (an election's leader's value). */
  holder: string;
  /** The lease's fence (an election's term). */
  fence: bigint;
  /** Time left on the lease unless renewed. */
  remainingMs: number;
  /** The TTL the lease was granted or last renewed with. */
  ttlMs: number;
  /** When the lease was granted, by the store's clock (Unix epoch). */
  grantedAtUnixMs: number;
  /** Callers queued for the name on every broker replica. */
  waiters: number;
  /** Semaphore permits held now (0 for a lock). */
  permitsHeld: number;
  /** When not held: time left of a lock-delay in force now. */
  lockDelayRemainingMs: number;
}

/** One page of a listing (listPage). */
export interface ListPage {
  /** The names of the page with something on them (possibly none). */
  locks: Listed[];
  /** Empty when the walk is done; otherwise the `pageToken` of the next page. */
  nextPageToken: string;
}

/** What to list: see Client.listPage and Client.list. */
export interface ListOptions {
  /** Only names that start with this. Default: every name. */
  prefix?: string;
  /**
   * Whose names: empty (the default) for the caller's own; another tenant's
   * (`@root` for the root namespace) or `*` for every tenant's needs the
   * `admin` permission (PERMISSION_DENIED otherwise).
   */
  tenant?: string;
  /**
   * The most names the broker looks at in one call: 0 (the default) for its
   * default, 100; at most 1000 (INVALID_ARGUMENT, reason BAD_ARGUMENT,
   * `metadata.argument` `page_size`, past it).
   */
  pageSize?: number;
}

/** One page: ListOptions and where to go on. */
export interface ListPageOptions extends ListOptions {
  /** The previous page's `nextPageToken` (same prefix and tenant); empty for the first page. */
  pageToken?: string;
}

/** The answer of CheckFence. */
export interface FenceCheck {
  /** Whether the fence is the current lease's. */
  current: boolean;
  /** The fence of the lease that holds the name now; 0n if it is free. */
  currentFence: bigint;
}

/** An election's leader: its value and its term (its lease's fence). */
export interface Leader {
  value: string;
  term: bigint;
  remainingMs: number;
}

/** A fence as a BigInt, a safe integer or a decimal string. */
export type Fence = bigint | number | string;

const DEFAULT_TTL_MS = 10_000;
const MIN_BACKOFF_MS = 50;
const MAX_BACKOFF_MS = 2000;
/** Heartbeats never come closer together than this, whatever the TTL. */
const MIN_INTERVAL_MS = 50;
/**
 * Most leases one heartbeat names: the broker's default --max-stream-leases.
 * More leases go in several heartbeats per beat.
 */
const HEARTBEAT_LEASES = 1000;
/** How long close() gives each release: a broker that is down must not hold it up (the leases then expire at their TTL). */
const CLOSE_RELEASE_MS = 2000;

// gRPC's default reconnect backoff starts at 1 s and grows to 2 minutes: far
// too slow to resume a lease of a few seconds after a broker restart. HTTP/2
// pings notice a dead connection that TCP alone would not. (As the Python
// and Rust clients.)
const CHANNEL_OPTIONS: grpc.ChannelOptions = {
  'grpc.initial_reconnect_backoff_ms': 100,
  'grpc.max_reconnect_backoff_ms': MAX_BACKOFF_MS,
  'grpc.keepalive_time_ms': 10_000,
  'grpc.keepalive_timeout_ms': 5_000,
};

/** `hostname:pid`, so that an operator can find the holder. */
export function defaultHolder(): string {
  return `${hostname() || 'unknown'}:${process.pid}`;
}

/** Connects to a broker, or to several replicas of one: `new Client(target, options)`. */
export function connect(target: string | readonly string[], options: ConnectOptions = {}): Client {
  return new Client(target, options);
}

interface Stream {
  call: grpc.ClientDuplexStream<any, any>;
  index: number;
  /** The round trip of the last answered heartbeat on this stream, in microseconds (0: none yet): sent in the next one. */
  lastRoundTripUs: number;
}

/**
 * A lease as a heartbeat names it: its own TTL kept (ttl_ms 0), or, for an
 * auto lease, renewed for the TTL the broker suggests for the stream.
 */
function leaseRef(lease: Lease): object {
  return { name: lease.name, owner_token: lease.ownerToken, ttl_ms: 0, ttl_auto: lease.ttlAuto };
}

interface Pending {
  sent: number;
  leases: Lease[];
}

/** The calls that go on the Session stream when it is in use. */
const SESSION_METHODS = new Set<string>(['Acquire', 'Renew', 'Release']);

/**
 * A connection to a Leasehold broker, or to several replicas of one (sharing
 * one store).
 *
 * `target` is `host:port`; `http://` and `https://` prefixes are accepted,
 * and `https://` means TLS. Several replicas: an array of targets, or one
 * string of them separated by commas. Calls and the Session stream go to one
 * replica and move on to the next only when it cannot be reached (the call
 * failed to connect, so the request never left); the leases then resume there
 * by owner token. Every target takes the same TLS settings and token.
 *
 * Acquire, Release and the heartbeats that keep every lease alive go on one
 * Session stream (unary calls and a KeepAlive stream with `session: false`,
 * or with a broker that does not serve Session), and that stream keeps the
 * process alive while leases are held or requests are in flight: release
 * them, or close() the client, when done.
 */
export class Client {
  /** The broker addresses given, in order. */
  readonly targets: readonly string[];
  /** Whether the channels use TLS. */
  readonly tls: boolean;
  /** The timeout of unary calls, in milliseconds (plus the wait asked for). */
  readonly timeoutMs: number;

  readonly #brokers: Brokers;
  readonly #logger: Logger | null;
  readonly #leases = new Set<Lease>();
  readonly #pending = new Map<number, Pending>();
  readonly #observations = new Set<Observation>();
  readonly #keeper: Keeper;
  /** The Session streams; null with `session: false`. */
  readonly #sessions: Sessions | null;
  /** The heartbeat in flight on the Session stream, if one is. */
  #beating: object | null = null;
  /** The KeepAlive stream (no Session stream in use). */
  #stream: Stream | null = null;
  #seq = 0;
  #beatTimer: NodeJS.Timeout | null = null;
  #nextBeat = 0;
  #backoff = MIN_BACKOFF_MS;
  #closing = false;
  #closed = false;
  /** The broker's --max-wait as far as known: the longest wait of one call in a chain. */
  #maxWaitMs = DEFAULT_MAX_WAIT_MS;
  /** The advice of the last heartbeat answered (null: it had none). */
  #ttlAdvice: TtlAdvice | null = null;
  /** The streams (KeepAlive or Session) whose advice was reported: once each. */
  #advised = new WeakSet<object>();
  readonly #onTtlAdvice: ((advice: TtlAdvice) => void) | undefined;

  constructor(target: string | readonly string[], options: ConnectOptions = {}) {
    const { tls, ca, cert, key, serverName, token, credentials } = options;
    const { scheme, addresses } = splitTargets(target);
    if ((cert == null) !== (key == null)) throw new LeaseholdError('cert and key go together (mutual TLS needs both)');
    if (credentials != null && (tls === false || ca != null || cert != null)) {
      throw new LeaseholdError('give either credentials or tls/ca/cert/key, not both');
    }
    const secure = credentials != null || scheme === 'https' || tls === true || ca != null || cert != null;
    if (tls === false && secure) throw new LeaseholdError('tls: false contradicts an https:// target, a CA, a client certificate or credentials');
    if (scheme === 'http' && secure) throw new LeaseholdError('an http:// target is plaintext: use https:// (or no scheme) with TLS options');
    const channelCredentials = credentials
      ?? (secure ? grpc.credentials.createSsl(pem(ca, 'CA file'), pem(key, 'client key'), pem(cert, 'client certificate')) : grpc.credentials.createInsecure());
    const channelOptions: grpc.ChannelOptions = { ...CHANNEL_OPTIONS, ...(serverName ? { 'grpc.ssl_target_name_override': serverName } : {}), ...options.channelOptions };
    this.#logger = options.logger === undefined ? { warn: (m) => console.warn(`leasehold: ${m}`) } : options.logger;
    this.timeoutMs = checkMs(options.timeoutMs ?? 10_000, 'timeoutMs');
    if (options.onTtlAdvice !== undefined && typeof options.onTtlAdvice !== 'function') throw new TypeError('onTtlAdvice takes a function');
    this.#onTtlAdvice = options.onTtlAdvice;
    this.#brokers = new Brokers(addresses, channelCredentials, channelOptions, checkToken(token), (m) => this.#warn(m));
    this.targets = this.#brokers.targets;
    this.tls = secure;
    this.#keeper = {
      lose: (lease, reason, message) => this.#lose(lease, reason, message),
      release: (lease) => this.#release(lease),
      warn: (message) => this.#warn(message),
    };
    this.#sessions = options.session === false ? null : new Sessions(this.#brokers, {
      // A grant that arrived after its caller gave up: nobody will use it.
      unclaimed: (lease) => { void this.#releaseCall(lease.name, lease.owner_token, CLOSE_RELEASE_MS).catch(() => {}); },
      busy: () => this.#leases.size > 0 && !this.#closed,
      broken: () => { if (!this.#beating) this.#retrySoon(); },
      debug: (message) => this.#debug(message),
    });
  }

  /** The broker address calls go to now (with several, the one in use). */
  get target(): string { return this.#brokers.target; }

  /**
   * The broker's advice in the answer to the last heartbeat: a TTL of a
   * lease it renewed is under 10 times the p99 of the stream's heartbeat
   * round trips. null while the TTLs are fit for the latency measured (or
   * before 3 round trips were measured).
   */
  get ttlAdvice(): TtlAdvice | null { return this.#ttlAdvice; }

  // -- leases ---------------------------------------------------------------

  /**
   * Takes the lease on `name`, renewed in the background until released or
   * lost. Rejects with NotAcquired (`err.code === status.ABORTED`) if the
   * lock is held and the wait ran out, with LeaseholdError for other refusals
   * (e.g. INVALID_ARGUMENT for a TTL outside the broker's bounds), and with
   * the signal's reason when `signal` aborts the wait.
   */
  async acquire(name: string, options: AcquireOptions = {}): Promise<Lease> {
    this.#checkOpen();
    const auto = options.ttlMs === 'auto';
    // Auto: ttl_ms 0 and ttl_auto, the broker chooses.
    const ttlMs = auto ? 0 : checkMs(options.ttlMs ?? DEFAULT_TTL_MS, 'ttlMs');
    const waitMs = endless(options.waitMs) ? null : checkMs(options.waitMs ?? 0, 'waitMs');
    const request = {
      name,
      ttl_ms: ttlMs,
      ttl_auto: auto,
      wait_timeout_ms: waitMs ?? 0,
      holder: options.holder ?? defaultHolder(),
      lock_delay_ms: checkMs(options.lockDelayMs ?? 0, 'lockDelayMs'),
      limit: checkCount(options.limit ?? 0, 'limit'),
    };
    const marginMs = optionalMs(options.marginMs, 'marginMs'); // checked before anything is granted
    const given = { name, ttl: auto ? 'auto' : ttlMs, wait: waitMs, holder: request.holder, lock_delay: request.lock_delay_ms, limit: request.limit };
    const { res, sent } = await this.#waiting('Acquire', request, waitMs, options.signal, given);
    return this.#hold(res.lease, Number(res.waited_ms), sent, marginMs, options.signal, auto);
  }

  /**
   * The calls of a wait of `waitMs` (null: as long as it takes): one call
   * when the wait is within the broker's --max-wait, else a chain of calls,
   * each within --max-wait (learnt from the `max_wait_ms` of its refusal of
   * a longer wait; 5 minutes until then), each but the last asking the
   * broker to keep its place in line when its wait runs out, and the next
   * sent at once in that place (the broker keeps it 3 s). Returns the answer
   * and the time the granting call was sent (the lease's deadline counts
   * from then). A refusal of one of the caller's arguments names it as the
   * caller does (`given`: the arguments by the broker's names).
   *
   * A broker's graceful shutdown (SIGTERM: a rolling restart) ends the call
   * waiting on it with UNAVAILABLE (from the broker: its reason UNAVAILABLE),
   * and keeps the place of a call that asked to keep it, as for a wait that
   * ran out: the wait goes on at once on the next replica, in that place.
   * The last call of a finite wait keeps no place (its caller gives up when
   * it runs out): it goes on at the back of the line there, for the time it
   * has left. A place that lapsed meanwhile is
   * no error either (the call joins at the back). Moving on stops when a
   * whole round of replicas, one after the other, was unreachable or
   * shutting down as the call arrived: no broker can serve the wait, and the
   * caller gets that UNAVAILABLE, as for any call that reaches no broker.
   */
  async #waiting(method: string, request: object, waitMs: number | null, signal: AbortSignal | undefined,
    given: Record<string, unknown>): Promise<{ res: any; sent: number }> {
    try {
      return await this.#chain(method, request, waitMs, signal);
    } catch (err) {
      throw inCallerWords(err, given);
    }
  }

  async #chain(method: string, request: object, waitMs: number | null, signal: AbortSignal | undefined): Promise<{ res: any; sent: number }> {
    const end = waitMs === null ? Infinity : now() + waitMs;
    let place = '';
    // Replicas in a row whose shutdown turned the call away on arrival.
    let unserved = 0;
    for (;;) {
      const sent = now();
      // The deadline counts from the time the request was *sent*. Each call
      // waits at most --max-wait; one that does not reach the end of the
      // wait keeps its place in line for the next (the last keeps none: its
      // caller gives up).
      const left = waitMs === null ? Infinity : Math.max(0, Math.round(end - sent));
      const segment = Math.min(left, this.#maxWaitMs);
      const last = segment >= left;
      const call = { ...request, wait_timeout_ms: segment, keep_place: !last, place };
      try {
        return { res: await this.#call(method, call, segment + this.timeoutMs, signal), sent };
      } catch (err) {
        if (!(err instanceof LeaseholdError)) throw err;
        if (shuttingDown(err)) {
          const kept = keptPlace(err);
          if (kept) place = kept; // kept by the broker going away: wait there on the next one
          if (now() - sent >= SERVED_FOR_MS) unserved = 0; // it was waiting there: a new round starts
          const index = answeredBy(err);
          if (index === undefined || unserved + 1 >= this.#brokers.size) throw err;
          unserved += 1;
          this.#brokers.moveOn(index, 'shutting down');
          continue;
        }
        if (err.code === status.ABORTED) {
          if (last || now() >= end) throw err; // the caller's wait ran out
          unserved = 0; // a broker served the whole call
          const kept = keptPlace(err);
          if (kept) place = kept; // the next call waits there
          else if (now() - sent < 0.9 * segment) throw err; // not a wait that ran out
          continue; // (no place: a broker from before keep_place; the next call joins at the back)
        }
        // A wait longer than the broker's --max-wait: go on with calls of
        // its max_wait_ms.
        const learnt = maxWaitFrom(err);
        if (learnt !== null && learnt < segment) {
          this.#maxWaitMs = learnt;
          continue;
        }
        throw err;
      }
    }
  }

  /**
   * Becomes the leader of `election` with `value` (waiting up to `waitMs`).
   * The lease returned is the leadership: its fence is the leader's term,
   * attach it to what the leader writes; release it to resign. Rejects with
   * NotAcquired if another leader remains.
   */
  async campaign(election: string, value: string, options: CampaignOptions = {}): Promise<Lease> {
    this.#checkOpen();
    if ((options.ttlMs as unknown) === 'auto') throw new LeaseholdError("campaign takes a ttlMs in milliseconds: the broker's Campaign has no 'auto' TTL (acquire has)");
    const waitMs = endless(options.waitMs) ? null : checkMs(options.waitMs ?? 0, 'waitMs');
    const request = { election, value, ttl_ms: checkMs(options.ttlMs ?? DEFAULT_TTL_MS, 'ttlMs'), wait_timeout_ms: waitMs ?? 0 };
    const marginMs = optionalMs(options.marginMs, 'marginMs');
    const given = { election, value, ttl: request.ttl_ms, wait: waitMs };
    const { res, sent } = await this.#waiting('Campaign', request, waitMs, options.signal, given);
    return this.#hold(res.lease, Number(res.waited_ms), sent, marginMs, options.signal, false);
  }

  #hold(granted: any, waitedMs: number, sent: number, marginMs: number | undefined, signal: AbortSignal | undefined, auto: boolean): Lease {
    const ttlMs = Number(granted.ttl_ms); // the TTL the store applied (the one chosen, for auto), which counts
    const lease = new Lease(this.#keeper, granted.name, granted.owner_token, BigInt(granted.fence), ttlMs, marginMs, waitedMs, sent, auto);
    if (signal?.aborted || this.#closing || this.#closed) {
      // Aborted, or the client closed, as the grant arrived: nobody will
      // use it or renew it, so free it now (best effort).
      void lease.release().catch(() => {});
      throw signal?.aborted ? abortError(signal) : new LeaseholdError('the client was closed while the call was in flight');
    }
    this.#leases.add(lease);
    this.#scheduleBeat(this.#interval()); // a shorter TTL may need an earlier heartbeat
    return lease;
  }

  /**
   * Releases a lease known only by its name and owner token (e.g. taken by
   * another process). Rejects with LeaseLost if it is already gone.
   */
  async releaseToken(name: string, ownerToken: string, options: { timeoutMs?: number } = {}): Promise<void> {
    this.#checkOpen();
    try {
      await this.#releaseCall(name, ownerToken, options.timeoutMs ?? this.timeoutMs);
    } catch (err) {
      throw inCallerWords(releaseError(err), { name });
    }
  }

  // -- questions ------------------------------------------------------------

  /**
   * Who holds `name` (`held` is false for a free name). `tenant`: another
   * tenant's lock of that name, for a credential with the `admin` permission.
   */
  async describe(name: string, options: { tenant?: string } = {}): Promise<Description> {
    const r = await this.#unary('Describe', { name, tenant: options.tenant ?? '' }, { name, tenant: options.tenant });
    return {
      held: r.held,
      holder: r.holder,
      fence: BigInt(r.fence),
      remainingMs: Number(r.remaining_ms),
      ttlMs: Number(r.ttl_ms),
      grantedAtUnixMs: Number(r.granted_at_unix_ms),
      waiters: Number(r.waiters),
      localWaiters: Number(r.local_waiters),
      lockDelayMs: Number(r.lock_delay_ms),
      lockDelayRemainingMs: Number(r.lock_delay_remaining_ms),
      permitsHeld: Number(r.permits_held),
    };
  }

  /**
   * One page of the names that start with `prefix` and have something on
   * them now: a lease, permits, callers waiting, a lock-delay (free names are
   * left out). The broker looks at no more than `pageSize` names per call,
   * so a page may hold fewer entries, even none, while `nextPageToken` is not
   * empty: pass it back as `pageToken`, with the same prefix and tenant,
   * until it is. Or let list() walk the pages.
   */
  async listPage(options: ListPageOptions = {}): Promise<ListPage> {
    const prefix = options.prefix ?? '';
    const tenant = options.tenant ?? '';
    const pageToken = options.pageToken ?? '';
    const pageSize = checkCount(options.pageSize ?? 0, 'pageSize');
    if (pageSize > 0xffff_ffff) throw new LeaseholdError(`pageSize must fit in 32 bits (the broker takes at most 1000), got ${pageSize}`);
    const given = { prefix, tenant, page_size: pageSize, page_token: pageToken };
    const r = await this.#unary('List', { prefix, tenant, page_size: pageSize, page_token: pageToken }, given);
    return { locks: (r.locks ?? []).map(toListed), nextPageToken: r.next_page_token ?? '' };
  }

  /**
   * Every name that starts with `prefix` and has something on it, for `for
   * await`: each page (listPage) is asked for when the previous one is used
   * up, so a listing of any length holds one page in memory. A refusal
   * rejects at the step where it happens; breaking out of the loop stops
   * the walk.
   *
   * Names come in name order, except on a Redis store (its SCAN's order),
   * where a name may also come twice (on two pages): the iterator passes them
   * on as they come (removing them would mean remembering every name of the
   * walk). When that matters, keep one per (tenant, name), as `leasehold list`
   * does. A name held for the whole walk is listed; one taken or freed
   * during it may or may not be.
   */
  async *list(options: ListOptions = {}): AsyncGenerator<Listed, void, undefined> {
    let pageToken = '';
    for (;;) {
      const page = await this.listPage({ ...options, pageToken });
      yield* page.locks;
      if (!page.nextPageToken) return;
      pageToken = page.nextPageToken;
    }
  }

  /**
   * Whether `fence` is the fence of the current lease on `name`, for a
   * resource that cannot remember the highest fence it has seen. The answer
   * can be stale by the time it arrives: a resource that keeps the highest
   * fence itself is safer.
   */
  async checkFence(name: string, fence: Fence): Promise<FenceCheck> {
    const r = await this.#unary('CheckFence', { name, fence: String(fence) }, { name });
    return { current: r.current, currentFence: BigInt(r.current_fence) };
  }

  /** The current leader of `election`, or null. */
  async leader(election: string): Promise<Leader | null> {
    return toLeader(await this.#unary('Leader', { election }, { election }));
  }

  /**
   * The leadership of `election` now, then every change as it happens
   * (pushed by the broker, nothing polls): an async iterable of Leader
   * (null: no leader). Resolves once the first answer arrived (within the
   * client's timeout), so refusals (UNAUTHENTICATED, INVALID_ARGUMENT) reject
   * here. Cancel it (or abort `signal`, or break out of `for await`) to end it.
   */
  async observe(election: string, options: { signal?: AbortSignal } = {}): Promise<Observation> {
    this.#checkOpen();
    const { signal } = options;
    let attempts = this.#brokers.size;
    for (;;) {
      if (signal?.aborted) throw abortError(signal);
      const { index, call } = this.#brokers.serverStream('Observe', { election });
      const observation = new Observation(call, () => this.#observations.delete(observation));
      const onAbort = () => observation.cancel();
      signal?.addEventListener('abort', onAbort, { once: true });
      try {
        await observation._first(this.timeoutMs);
        this.#observations.add(observation);
        return observation;
      } catch (err) {
        signal?.removeEventListener('abort', onAbort);
        observation.cancel();
        if (signal?.aborted) throw abortError(signal);
        if (attempts > 1 && notConnected(err)) {
          this.#brokers.unreachable(index);
          attempts -= 1;
          continue;
        }
        throw inCallerWords(isServiceError(err) ? fromServiceError(err) : err, { election });
      }
    }
  }

  // -- administration -------------------------------------------------------

  /**
   * Ends the current lease on `name`, whoever holds it, and returns its
   * fence. Its holder hears it is lost (REVOKED) at its next heartbeat. An
   * operator's tool: the credential needs the `admin` permission (without an
   * --auth-file, the broker must run with --enable-revoke), otherwise
   * PERMISSION_DENIED. NOT_FOUND if the name is not held.
   */
  async revoke(name: string, options: { tenant?: string } = {}): Promise<bigint> {
    return BigInt((await this.#unary('Revoke', { name, tenant: options.tenant ?? '' }, { name, tenant: options.tenant })).fence);
  }

  /** A unary call; `given`: the caller's arguments, for the message of a refusal of one. */
  async #unary(method: string, request: object, given: Record<string, unknown>): Promise<any> {
    this.#checkOpen();
    try {
      return await this.#brokers.call(method, request, this.timeoutMs);
    } catch (err) {
      throw inCallerWords(err, given);
    }
  }

  /**
   * Acquire, Renew or Release: a request on the Session stream when it is
   * in use, else (and for every other call) a unary call. Either way it
   * rejects with the same errors.
   */
  async #call(method: string, request: object, timeoutMs: number, signal?: AbortSignal): Promise<any> {
    const sessions = this.#sessions;
    if (sessions && SESSION_METHODS.has(method) && sessions.supported) {
      try {
        return await sessions.request(method as SessionMethod, request, timeoutMs, signal);
      } catch (err) {
        // An older broker: nothing was done; the unary call does it.
        if (err instanceof NoSession) return this.#brokers.call(method, request, timeoutMs, signal);
        // The stream's cap on the leases it tracks: a unary call has none.
        if (method === 'Acquire' && streamFull(err)) {
          return this.#brokers.call(method, request, timeoutMs, signal);
        }
        throw err;
      }
    }
    return this.#brokers.call(method, request, timeoutMs, signal);
  }

  #releaseCall(name: string, ownerToken: string, timeoutMs: number): Promise<void> {
    return this.#call('Release', { name, owner_token: ownerToken }, timeoutMs);
  }

  // -- lifetime -------------------------------------------------------------

  #checkOpen(): void {
    if (this.#closed || this.#closing) throw new LeaseholdError('the client is closed');
  }

  /**
   * Cancels the calls in flight (a waiting acquire rejects), releases the
   * leases still held (best effort, 2 s each), ends the observations and the
   * stream, closes the channels.
   */
  async close(): Promise<void> {
    if (this.#closed || this.#closing) return;
    this.#closing = true;
    this.#brokers.cancelCalls(); // waiting acquires and campaigns end now
    this.#sessions?.cancelAll(); // and those on the Session stream
    await Promise.allSettled([...this.#leases].map((lease) => lease.release()));
    this.#closed = true;
    for (const observation of [...this.#observations]) observation.cancel();
    if (this.#beatTimer) clearTimeout(this.#beatTimer);
    this.#beatTimer = null;
    this.#endStream(false);
    // Late answers (a grant that crossed its cancel is released), then the end.
    await this.#sessions?.close(CLOSE_RELEASE_MS);
    this.#brokers.close();
  }

  /** For `await using client = connect(...)`: closed at the end of the block. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** What printing a client shows: never the token. */
  toString(): string {
    const where = this.targets.length === 1 ? `target: ${this.target}` : `targets: ${this.targets.join(',')}, current: ${this.target}`;
    return `Client { ${where}, tls: ${this.tls}${this.#brokers.hasToken ? ', token: <redacted>' : ''} }`;
  }
  [inspect.custom](): string { return this.toString(); }

  // -- the keeper -------------------------------------------------------------

  #warn(message: string): void { this.#logger?.warn(message); }
  #debug(message: string): void { this.#logger?.debug?.(message); }

  async #release(lease: Lease): Promise<void> {
    this.#leases.delete(lease);
    const timeoutMs = this.#closing ? CLOSE_RELEASE_MS : this.timeoutMs;
    try {
      await this.#releaseCall(lease.name, lease.ownerToken, timeoutMs);
    } catch (err) {
      throw releaseError(err);
    }
  }

  #lose(lease: Lease, reason: LossReason, message: string): void {
    this.#leases.delete(lease);
    if (!lease._markLost(reason, message)) return;
    this.#warn(`lease ${lease.name} lost: ${reason} (${message})`);
    // Past our deadline the lease is useless to us: release it so the next
    // holder need not wait for the broker-side TTL (best effort, in the background).
    if (reason === 'DEADLINE_PASSED') {
      this.#releaseCall(lease.name, lease.ownerToken, CLOSE_RELEASE_MS).catch(() => {});
    }
  }

  /** A third of the shortest TTL. */
  #interval(leases: Iterable<Lease> = this.#leases): number {
    let shortest = Infinity;
    for (const lease of leases) shortest = Math.min(shortest, lease.ttlMs);
    return shortest === Infinity ? 1000 : Math.max(MIN_INTERVAL_MS, shortest / 3);
  }

  #scheduleBeat(delayMs: number): void {
    if (this.#beatTimer && this.#nextBeat <= now() + delayMs) return; // an earlier one is due
    if (this.#beatTimer) clearTimeout(this.#beatTimer);
    this.#nextBeat = now() + delayMs;
    this.#beatTimer = setTimeout(() => { this.#beatTimer = null; this.#beat(); }, delayMs);
  }

  #beat(): void {
    // Leases whose deadline passed before their timer fired are lost now.
    for (const lease of [...this.#leases]) {
      if (now() >= lease.deadline) this.#lose(lease, 'DEADLINE_PASSED', 'no renewal was confirmed before the local deadline');
    }
    const live = [...this.#leases];
    if (this.#closed || live.length === 0) {
      this.#endStream(false); // no lease left: a clean end
      this.#sessions?.idle();
      return;
    }
    const interval = this.#interval(live);
    if (this.#sessions?.supported) {
      this.#endStream(false); // heartbeats move off a KeepAlive stream (to an older broker before)
      this.#sessionBeat(live, interval);
    } else {
      this.#keepAliveBeat(live, interval);
    }
    this.#scheduleBeat(interval);
  }

  /**
   * One heartbeat on the Session stream, naming every live lease (in several
   * requests, one after the other, past HEARTBEAT_LEASES), unless one is in
   * flight: the broker runs one heartbeat of a stream at a time and reads
   * nothing more while a second one waits. Each has a deadline of two
   * intervals (at least a second, for a loaded machine): past it the stream
   * is taken for stalled if nothing came back on it (session.ts).
   */
  #sessionBeat(live: Lease[], interval: number): void {
    if (this.#beating) return;
    const beat = {};
    this.#beating = beat;
    const sessions = this.#sessions!;
    const timeoutMs = Math.round(Math.max(2 * interval, 1000));
    void (async () => {
      try {
        for (let start = 0; start < live.length; start += HEARTBEAT_LEASES) {
          const chunk = live.slice(start, start + HEARTBEAT_LEASES).filter((l) => !l.released && l.lostReason === null);
          if (chunk.length === 0) continue;
          const sent = now();
          // (session.ts adds the stream's last round trip.)
          const { res, stream } = await sessions.requestOn('Heartbeat', { seq: ++this.#seq, leases: chunk.map(leaseRef) }, timeoutMs);
          this.#backoff = MIN_BACKOFF_MS;
          this.#applyStatuses(sent, chunk, res.leases ?? []);
          this.#advice(stream, res.advice);
        }
      } catch (err) {
        // An older broker: the next beat (now) goes on a KeepAlive stream.
        if (err instanceof NoSession) {
          this.#beating = null;
          this.#restartBeat(0);
          return;
        }
        this.#debug(`heartbeat failed: ${err instanceof Error ? err.message : String(err)}`);
        if (!this.#closing && !this.#closed) this.#retrySoon();
      } finally {
        if (this.#beating === beat) this.#beating = null;
      }
    })();
  }

  /** Heartbeats on the KeepAlive stream (no Session stream in use). */
  #keepAliveBeat(live: Lease[], interval: number): void {
    // A heartbeat unanswered for two intervals (at least a second, for a
    // loaded machine) means a stalled stream: start over.
    let oldest = Infinity;
    for (const p of this.#pending.values()) oldest = Math.min(oldest, p.sent);
    if (this.#stream && now() - oldest > Math.max(2 * interval, 1000)) {
      this.#debug('KeepAlive stream stalled; reconnecting');
      this.#endStream(true);
    }
    if (!this.#stream) this.#openStream();
    const stream = this.#stream!;
    for (let start = 0; start < live.length; start += HEARTBEAT_LEASES) {
      const chunk = live.slice(start, start + HEARTBEAT_LEASES);
      const seq = ++this.#seq;
      this.#pending.set(seq, { sent: now(), leases: chunk });
      stream.call.write({ seq, leases: chunk.map(leaseRef), last_round_trip_us: stream.lastRoundTripUs });
    }
  }

  /**
   * The next heartbeat soon, after a stream broke or a heartbeat failed:
   * never later than a heartbeat interval, jittered so that clients do not
   * reconnect in lockstep.
   */
  #retrySoon(): void {
    if (this.#leases.size === 0 || this.#closed) return;
    const delay = Math.min(this.#backoff * (0.5 + Math.random()), this.#interval());
    this.#backoff = Math.min(this.#backoff * 2, MAX_BACKOFF_MS);
    this.#restartBeat(delay);
  }

  #restartBeat(delayMs: number): void {
    if (this.#beatTimer) clearTimeout(this.#beatTimer);
    this.#beatTimer = null;
    this.#scheduleBeat(delayMs);
  }

  #openStream(): void {
    const { index, stub } = this.#brokers.current();
    const stream: Stream = { call: stub.KeepAlive(this.#brokers.metadata()), index, lastRoundTripUs: 0 };
    this.#stream = stream;
    this.#pending.clear();
    stream.call.on('data', (res: any) => { if (this.#stream === stream) this.#apply(stream, res); });
    stream.call.on('error', () => {}); // reported through 'status' as well
    stream.call.on('status', (st: grpc.StatusObject) => {
      if (this.#stream !== stream) return; // an abandoned stream
      this.#stream = null;
      this.#pending.clear();
      this.#debug(`KeepAlive stream to ${this.#brokers.targets[index]} ended: ${status[st.code]} ${st.details}`);
      // The replica cannot be reached: resume the leases on the next one (if any).
      if (notConnected(st)) this.#brokers.unreachable(index);
      // Reopen soon enough to resume the leases before their deadlines.
      this.#retrySoon();
    });
  }

  #endStream(cancel: boolean): void {
    const stream = this.#stream;
    this.#stream = null;
    this.#pending.clear();
    if (!stream) return;
    if (cancel) stream.call.cancel();
    else stream.call.end(); // half-close after releasing is not a loss
  }

  #apply(stream: Stream, res: any): void {
    const seq = Number(res.seq);
    const entry = this.#pending.get(seq);
    if (!entry) return;
    stream.lastRoundTripUs = Math.max(1, Math.round((now() - entry.sent) * 1000));
    // Answers come in order: older heartbeats still pending got none.
    for (const s of this.#pending.keys()) if (s <= seq) this.#pending.delete(s);
    this.#backoff = MIN_BACKOFF_MS;
    this.#applyStatuses(entry.sent, entry.leases, res.leases);
    this.#advice(stream, res.advice);
  }

  /**
   * The advice (or none) of a heartbeat's answer on `stream`: kept for
   * `ttlAdvice`, and the first on each stream reported (a warning, and
   * onTtlAdvice). Once per stream, not at every heartbeat: the advice stands
   * as long as the latency and the TTLs do, and a log line per heartbeat
   * would drown the rest.
   */
  #advice(stream: object, raw: any): void {
    if (!raw) {
      this.#ttlAdvice = null;
      return;
    }
    const advice: TtlAdvice = {
      roundTripP99Us: Number(raw.round_trip_p99_us),
      shortestTtlMs: Number(raw.shortest_ttl_ms),
      suggestedTtlMs: Number(raw.suggested_ttl_ms),
      leasesBelow: Number(raw.leases_below),
      message: raw.message ?? '',
    };
    this.#ttlAdvice = advice;
    if (this.#advised.has(stream)) return;
    this.#advised.add(stream);
    this.#warn(`TTL too short for the heartbeat latency: ${advice.leasesBelow} lease(s) with a TTL under 10 x the round-trip p99 `
      + `(${(advice.roundTripP99Us / 1000).toFixed(1)} ms; shortest TTL ${advice.shortestTtlMs} ms): use ttlMs >= ${advice.suggestedTtlMs} or ttlMs: 'auto'`
      + (advice.message ? ` (broker: ${advice.message})` : ''));
    if (this.#onTtlAdvice) {
      try {
        this.#onTtlAdvice(advice);
      } catch (err) {
        this.#warn(`onTtlAdvice threw: ${err instanceof Error ? err.stack ?? err.message : String(err)}`);
      }
    }
  }

  /**
   * What the broker said of each lease of a heartbeat sent at `sent` (same
   * order). An auto lease's TTL may have changed: the next heartbeat is due
   * a third of the shortest TTL from now at the latest.
   */
  #applyStatuses(sent: number, leases: Lease[], statuses: any[]): void {
    this.#applyEach(sent, leases, statuses);
    if (leases.some((l) => l.ttlAuto) && this.#leases.size > 0 && !this.#closed) this.#scheduleBeat(this.#interval());
  }

  #applyEach(sent: number, leases: Lease[], statuses: any[]): void {
    statuses.forEach((st, i) => {
      const lease = leases[i];
      if (!lease || lease.name !== st.name || lease.released) return;
      if (st.state === STATE.ALIVE) {
        lease._renewed(sent, Number(st.ttl_ms));
      } else if (st.state === STATE.REJECTED) {
        this.#lose(lease, 'EXPIRED', `rejected by the broker: ${st.message}`);
      } else if (st.state === STATE.LOST) {
        // EXPIRED (or unspecified) before our own, early, deadline cannot be
        // an expiry: the store lost it. The broker cannot always tell (e.g.
        // on a new stream's first heartbeat); we can.
        let reason: LossReason = LOSS_REASON[st.reason] ?? 'EXPIRED';
        if (reason === 'EXPIRED' && now() < lease.deadline) reason = 'STORE_LOST';
        this.#lose(lease, reason, st.message);
      }
      // UNCONFIRMED: the store did not answer; keep beating, the deadline decides.
    });
  }
}

/**
 * The leadership of an election as it is now, then every change, as the
 * broker pushes them: `for await (const leader of observation)` gives Leader
 * objects (null: no leader). The iteration ends after cancel(). If the stream
 * breaks (the broker shut down or died), the next step rejects with a
 * LeaseholdError (UNAVAILABLE): observe again, which goes to another replica
 * if this one cannot be reached.
 */
export class Observation implements AsyncIterableIterator<Leader | null> {
  readonly #call: grpc.ClientReadableStream<any>;
  readonly #it: AsyncIterator<any>;
  readonly #onEnd: () => void;
  #first: any = undefined;
  #cancelled = false;

  /** @internal */
  constructor(call: grpc.ClientReadableStream<any>, onEnd: () => void) {
    this.#call = call;
    this.#it = call[Symbol.asyncIterator]();
    this.#onEnd = onEnd;
  }

  /** @internal Waits for the first answer, which tells whether the call could be made. */
  async _first(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new LeaseholdError(`DEADLINE_EXCEEDED: no answer to Observe within ${timeoutMs} ms`, status.DEADLINE_EXCEEDED)), timeoutMs);
    });
    try {
      const r = await Promise.race([this.#it.next(), late]);
      if (r.done) throw new LeaseholdError('the broker ended the Observe stream without an answer');
      this.#first = r.value;
    } finally {
      clearTimeout(timer);
    }
  }

  async next(): Promise<IteratorResult<Leader | null>> {
    if (this.#cancelled) return { done: true, value: undefined };
    if (this.#first !== undefined) {
      const r = this.#first;
      this.#first = undefined;
      return { done: false, value: toLeader(r) };
    }
    try {
      const r = await this.#it.next();
      if (r.done) return { done: true, value: undefined };
      return { done: false, value: toLeader(r.value) };
    } catch (err) {
      if (this.#cancelled) return { done: true, value: undefined };
      throw isServiceError(err) ? fromServiceError(err) : err;
    }
  }

  async return(): Promise<IteratorResult<Leader | null>> {
    this.cancel();
    return { done: true, value: undefined };
  }

  [Symbol.asyncIterator](): this { return this; }

  /** Ends the stream; the iteration stops. */
  cancel(): void {
    if (this.#cancelled) return;
    this.#cancelled = true;
    this.#call.cancel();
    this.#onEnd();
  }
}

function toListed(l: any): Listed {
  return {
    tenant: l.tenant,
    name: l.name,
    held: l.held,
    holder: l.holder,
    fence: BigInt(l.fence),
    remainingMs: Number(l.remaining_ms),
    ttlMs: Number(l.ttl_ms),
    grantedAtUnixMs: Number(l.granted_at_unix_ms),
    waiters: Number(l.waiters),
    permitsHeld: Number(l.permits_held),
    lockDelayRemainingMs: Number(l.lock_delay_remaining_ms),
  };
}

function toLeader(r: any): Leader | null {
  if (!r.present) return null;
  return { value: r.value, term: BigInt(r.term), remainingMs: Number(r.remaining_ms) };
}

/** The scheme (http, https or null) and the addresses of one target, a comma-separated list of them, or an array of them. */
function splitTargets(target: string | readonly string[]): { scheme: 'http' | 'https' | null; addresses: string[] } {
  const list = typeof target === 'string' ? target.split(',') : Array.isArray(target) ? target : null;
  if (!list || !list.every((t) => typeof t === 'string')) throw new TypeError('target must be a string or an array of strings');
  const schemes = new Set<string | null>();
  const addresses: string[] = [];
  for (let t of list) {
    t = t.trim();
    if (!t) continue;
    const m = /^(https?):\/\//.exec(t);
    schemes.add(m ? m[1] : null);
    addresses.push((m ? t.slice(m[0].length) : t).replace(/\/+$/, ''));
  }
  if (addresses.length === 0) throw new LeaseholdError('no broker address given');
  if (schemes.has('http') && schemes.has('https')) throw new LeaseholdError('the broker addresses mix http:// and https://: one client is either TLS or plaintext');
  return { scheme: schemes.has('https') ? 'https' : schemes.has('http') ? 'http' : null, addresses };
}

function optionalMs(value: number | undefined, what: string): number | undefined {
  return value === undefined ? undefined : checkMs(value, what);
}

function checkCount(value: unknown, what: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) throw new LeaseholdError(`${what} must be a non-negative integer, got ${String(value)}`);
  return value;
}

function pem(value: Pem | undefined, what: string): Buffer | null {
  if (value == null) return null;
  if (typeof value !== 'string') return Buffer.from(value);
  try {
    return readFileSync(value);
  } catch (err) {
    // The path, never the contents (it may be a key).
    throw new LeaseholdError(`cannot read ${what} ${value}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

// Visible ASCII, no spaces: what a header value carries. Checked here so a bad
// token fails at once with a message that does not contain it.
function checkToken(token: string | undefined): string | null {
  if (token == null) return null;
  if (typeof token !== 'string' || !/^[\x21-\x7e]+$/.test(token)) {
    throw new LeaseholdError('token must be a non-empty string of visible ASCII without spaces (the token itself is not shown)');
  }
  return token;
}
