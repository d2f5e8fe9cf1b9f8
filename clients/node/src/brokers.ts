// The broker replicas a Client talks to: one channel each, one current.
//
// Calls go to the current replica and move on to the next only when it cannot
// be reached: gRPC failed the call with UNAVAILABLE because no connection
// could be made, so the request never left this process and sending it
// elsewhere cannot apply it twice (as the Rust client's connect_any and the
// Python client). Any other failure, the broker's own UNAVAILABLE included,
// is the caller's to see; the one exception is a waiting acquire or campaign
// that its broker's graceful shutdown ended: the client's wait goes on on the
// next replica, in the place in line the broker kept (client.ts, #waiting).
// The Session stream follows the same rule for the requests it carries
// (session.ts).
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { LeaseholdError, abortError, fromServiceError, notConnectedStatus } from './errors';
import { PROTO_FILE, PROTO_PACKAGE, SERVICE } from './names';

/** The proto ships inside the package (proto/, next to dist/), loaded once at first use. */
export const PROTO_DIR = join(__dirname, '..', 'proto');

type ServiceClient = grpc.Client & Record<string, any>;
type StubConstructor = new (target: string, credentials: grpc.ChannelCredentials, options?: grpc.ChannelOptions) => ServiceClient;
let stubConstructor: StubConstructor | null = null;

function loadService(): StubConstructor {
  if (stubConstructor) return stubConstructor;
  const definition = protoLoader.loadSync(PROTO_FILE, {
    includeDirs: [PROTO_DIR],
    keepCase: true, // field names as in the proto (owner_token, ttl_ms), not camelCased
    longs: String, // uint64 as decimal strings: fences become BigInt, never rounded
    enums: String,
    defaults: true,
  });
  let node: any = grpc.loadPackageDefinition(definition);
  for (const part of PROTO_PACKAGE) node = node?.[part];
  const ctor = node?.[SERVICE];
  if (typeof ctor !== 'function') throw new Error(`${PROTO_DIR}/${PROTO_FILE} has no service ${PROTO_PACKAGE.join('.')}.${SERVICE}`);
  stubConstructor = ctor as StubConstructor;
  return stubConstructor;
}

/**
 * Whether a call failed because no connection to the broker could be made
 * (so the request was never sent): grpc-js's UNAVAILABLE saying so
 * (errors.ts, notConnectedStatus).
 */
export function notConnected(err: unknown): boolean {
  const e = err as Partial<grpc.ServiceError> | null;
  return !!e && notConnectedStatus(e.code, e.details);
}

/** The replica that answered each failed call, by error (see answeredBy()). */
const answerers = new WeakMap<object, number>();

/** The index of the replica whose answer `err` is, if a Brokers call threw it. */
export function answeredBy(err: unknown): number | undefined {
  return typeof err === 'object' && err !== null ? answerers.get(err) : undefined;
}

/** Records that `err` is the answer of the replica at `index` (for answeredBy()). */
export function markAnswered(err: unknown, index: number): void {
  if (typeof err === 'object' && err !== null) answerers.set(err, index);
}

export class Brokers {
  readonly targets: readonly string[];
  readonly #stubs: ServiceClient[];
  readonly #token: string | null;
  #current = 0;
  #log: (message: string) => void;
  // Aborted by cancelCalls(): every unary call in flight listens to it.
  #inFlight = new AbortController();

  constructor(targets: string[], credentials: grpc.ChannelCredentials, options: grpc.ChannelOptions, token: string | null, log: (message: string) => void) {
    const Stub = loadService();
    this.targets = Object.freeze([...targets]);
    this.#stubs = targets.map((t) => new Stub(t, credentials, options));
    this.#token = token;
    this.#log = log;
  }

  get size(): number { return this.#stubs.length; }
  get hasToken(): boolean { return this.#token !== null; }

  /** The replica calls go to now: its index (for unreachable()) and its stub. */
  current(): { index: number; stub: ServiceClient } {
    return { index: this.#current, stub: this.#stubs[this.#current] };
  }

  get target(): string { return this.targets[this.#current]; }

  /** The replica at `index` could not be reached: move on to the next (unless another call already did). */
  unreachable(index: number): void {
    this.moveOn(index, 'unreachable');
  }

  /** Calls go to the replica after the one at `index` (unless another call already moved on): it is `why` (unreachable, shutting down). */
  moveOn(index: number, why: string): void {
    if (this.#stubs.length < 2 || this.#current !== index) return;
    this.#current = (index + 1) % this.#stubs.length;
    this.#log(`broker ${this.targets[index]} ${why}; moving to ${this.targets[this.#current]}`);
  }

  /**
   * The metadata of every call: the bearer token, if any. A fresh object per
   * call. (grpc-js's call credentials refuse plaintext channels, so the
   * token travels as plain call metadata; over TLS when TLS is on.)
   */
  metadata(): grpc.Metadata {
    const md = new grpc.Metadata();
    if (this.#token) md.set('authorization', `Bearer ${this.#token}`);
    return md;
  }

  /**
   * A unary call on the current replica, moving on to the next while
   * replicas cannot be reached (each is tried once). Rejects with a
   * LeaseholdError, or with the signal's reason once `signal` aborts (the
   * call is cancelled: a waiting Acquire leaves the queue at once).
   */
  async call<T = any>(method: string, request: object, timeoutMs: number, signal?: AbortSignal): Promise<T> {
    let attempts = this.#stubs.length;
    const cancelled = this.#inFlight.signal;
    for (;;) {
      const { index, stub } = this.current();
      try {
        return await unary<T>(stub, method, request, this.metadata(), timeoutMs, signal, cancelled);
      } catch (err) {
        if (signal?.aborted) throw abortError(signal);
        if (cancelled.aborted) throw new LeaseholdError(`${method} cancelled: the client is closed`);
        if (attempts > 1 && notConnected(err)) {
          this.unreachable(index);
          attempts -= 1;
          continue;
        }
        const error = isServiceError(err) ? fromServiceError(err) : err;
        markAnswered(error, index);
        throw error;
      }
    }
  }

  /** Opens a server-streaming call on the current replica (the caller handles failover). */
  serverStream(method: string, request: object): { index: number; call: grpc.ClientReadableStream<any> } {
    const { index, stub } = this.current();
    return { index, call: stub[method](request, this.metadata()) };
  }

  /** Cancels the unary calls in flight (a waiting Acquire leaves the queue); later calls are not affected. */
  cancelCalls(): void {
    const controller = this.#inFlight;
    this.#inFlight = new AbortController();
    controller.abort();
  }

  close(): void {
    this.cancelCalls();
    for (const stub of this.#stubs) stub.close();
  }
}

export function isServiceError(err: unknown): err is grpc.ServiceError {
  return err instanceof Error && typeof (err as grpc.ServiceError).code === 'number' && 'details' in err;
}

// One call, cancelled when either signal aborts (AbortSignal.any is not in Node 18).
function unary<T>(stub: ServiceClient, method: string, request: object, metadata: grpc.Metadata, timeoutMs: number, signal: AbortSignal | undefined, cancelled: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal));
    const onAbort = () => call.cancel();
    const call: grpc.ClientUnaryCall = stub[method](request, metadata, { deadline: Date.now() + timeoutMs }, (err: grpc.ServiceError | null, res: T) => {
      signal?.removeEventListener('abort', onAbort);
      cancelled.removeEventListener('abort', onAbort);
      if (err) reject(err);
      else resolve(res);
    });
    signal?.addEventListener('abort', onAbort, { once: true });
    cancelled.addEventListener('abort', onAbort, { once: true });
  });
}

/** A duration in whole milliseconds; throws unless `value` is a non-negative finite number. */
export function checkMs(value: unknown, what: string): number {
  if (typeof value !== 'number' || !(value >= 0) || !Number.isFinite(value)) {
    throw new LeaseholdError(`${what} must be a non-negative number of milliseconds, got ${String(value)}`);
  }
  return Math.round(value);
}
