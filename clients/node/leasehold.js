// A small example client for Leasehold (see ../../proto/leasehold/v1/leasehold.proto).
//
// It follows the rules of the Python and Rust clients (clients/python/README.md):
// - a lease's local deadline is (request *send* time + waited_ms + TTL - TTL/10),
//   so latency and clock skew can only make it early, never late;
// - one KeepAlive stream per client renews every lease, one heartbeat every
//   third of the shortest TTL; a broken stream is reopened and the leases are
//   resumed by owner token while their deadlines allow;
// - a lease is lost when the broker says LOST or REJECTED, or when its local
//   deadline passes without a confirmed renewal (broker unreachable, process
//   paused); a lost lease never comes back;
// - the owner token is a password: it is never logged or printed in full;
// - so is the bearer token (option `token`): sent as `authorization: Bearer`
//   metadata on every call and on the KeepAlive stream, never printed at all.
import { readFileSync } from 'node:fs';
import { inspect } from 'node:util';
import { fileURLToPath } from 'node:url';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';

export const status = grpc.status; // e.g. err.code === status.ABORTED: lock held

// Loaded at run time, so there is no generated code to keep in step with the proto.
const definition = protoLoader.loadSync('leasehold/v1/leasehold.proto', {
  includeDirs: [fileURLToPath(new URL('../../proto', import.meta.url))],
  keepCase: true, // field names as in the proto (owner_token, ttl_ms), not camelCased
  longs: String, // uint64 as decimal strings: fences are turned into BigInt, never rounded
  enums: String,
  defaults: true,
});
const { LeaseholdService } = grpc.loadPackageDefinition(definition).leasehold.v1;

const now = () => performance.now(); // monotonic: wall-clock steps cannot move deadlines
const MIN_BACKOFF_MS = 50;

export class Lease {
  #token;
  #client;
  constructor(client, name, token, fence, ttlMs, deadline) {
    this.#client = client;
    this.#token = token;
    this.name = name;
    this.fence = fence; // BigInt: compare fences, never subtract them (they are not dense)
    this.ttlMs = ttlMs;
    this.deadline = deadline; // on the performance.now() clock
    this.lostReason = null;
    this.released = false;
    // Resolves with the reason (EXPIRED, NOT_OWNER, STORE_LOST, REVOKED, REJECTED,
    // DEADLINE_PASSED) once the lease is lost. A release is not a loss: it stays pending.
    this.lost = new Promise((resolve) => (this._resolveLost = resolve));
    this._timer = null;
    this._armDeadline();
  }

  get ownerToken() { return this.#token; } // a getter: inspect() and JSON.stringify skip it

  // What printing or logging a lease shows: the token's first 4 characters only.
  toString() {
    return `Lease { name: ${this.name}, fence: ${this.fence}, token: ${this.#token.slice(0, 4)}…, lost: ${this.lostReason} }`;
  }
  [inspect.custom]() { return this.toString(); }
  toJSON() { return { name: this.name, fence: String(this.fence), token: `${this.#token.slice(0, 4)}…`, lostReason: this.lostReason }; }

  // Called with the send time of a heartbeat the broker confirmed. The
  // deadline only moves forward, and a lease already lost stays lost.
  _renewed(sent, ttlMs) {
    if (this.lostReason || this.released || now() >= this.deadline) return;
    this.deadline = Math.max(this.deadline, sent + ttlMs - ttlMs / 10);
    this._armDeadline();
  }

  // A timer at the local deadline reports the loss on time even if no
  // heartbeat answer (nor error) ever arrives.
  _armDeadline() {
    clearTimeout(this._timer);
    this._timer = setTimeout(() => {
      if (now() < this.deadline) return this._armDeadline(); // timers may fire a little early
      this.#client._lose(this, 'DEADLINE_PASSED', 'no renewal confirmed before the local deadline');
    }, Math.max(0, this.deadline - now()));
  }

  _markLost(reason) {
    clearTimeout(this._timer);
    if (this.lostReason || this.released) return false;
    this.lostReason = reason;
    this._resolveLost(reason);
    return true;
  }

  // Releases the lock and wakes the next waiter. Throws if the lease was lost
  // before: then it ran out while you held it, and your writes may be fenced off.
  async release() {
    if (this.released) return;
    if (this.lostReason) throw new Error(`lease ${this.name} was lost (${this.lostReason})`);
    this.released = true;
    clearTimeout(this._timer);
    this.#client._forget(this);
    await this.#client._unary('Release', { name: this.name, owner_token: this.#token });
  }
}

class Client {
  #token;
  constructor(target, credentials, { token = null, serverName = null, tls = false } = {}) {
    const options = serverName ? { 'grpc.ssl_target_name_override': serverName } : {};
    this._stub = new LeaseholdService(target, credentials, options);
    this.target = target;
    this.tls = tls;
    this.#token = token;
    this._leases = new Set(); // leases to keep alive
    this._stream = null;
    this._pending = new Map(); // heartbeat seq -> { sent, leases in request order }
    this._seq = 0;
    this._beatTimer = null;
    this._backoff = MIN_BACKOFF_MS;
    this._closed = false;
  }

  // The metadata of every call: the bearer token, if any. A fresh object per
  // call (grpc-js's call credentials refuse plaintext channels, so the token
  // travels as plain call metadata; it is sent over TLS when TLS is on).
  _metadata() {
    const md = new grpc.Metadata();
    if (this.#token) md.set('authorization', `Bearer ${this.#token}`);
    return md;
  }

  // What printing a client shows: never the token.
  [inspect.custom]() { return `Client { target: ${this.target}, tls: ${this.tls}${this.#token ? ', token: <redacted>' : ''} }`; }
  toString() { return this[inspect.custom](); }

  _unary(method, request, timeoutMs = 10_000) {
    return new Promise((resolve, reject) => {
      this._stub[method](request, this._metadata(), { deadline: Date.now() + timeoutMs }, (err, res) => (err ? reject(err) : resolve(res)));
    });
  }

  // Fails with err.code === status.ABORTED when the lock is held (and the wait ran out).
  async acquire(name, { ttlMs = 10_000, waitMs = 0, holder = '' } = {}) {
    if (this._closed) throw new Error('client is closed');
    const sent = now();
    const res = await this._unary('Acquire', { name, ttl_ms: ttlMs, wait_timeout_ms: waitMs, holder }, waitMs + 10_000);
    const { owner_token: token, fence, ttl_ms } = res.lease;
    const ttl = Number(ttl_ms); // the TTL the store applied, which counts, not the one asked for
    const lease = new Lease(this, name, token, BigInt(fence), ttl, sent + Number(res.waited_ms) + ttl - ttl / 10);
    lease.waitedMs = Number(res.waited_ms);
    this._leases.add(lease);
    this._scheduleBeat(this._interval()); // a shorter TTL may need an earlier heartbeat
    return lease;
  }

  async describe(name) {
    const r = await this._unary('Describe', { name });
    return { held: r.held, holder: r.holder, fence: BigInt(r.fence), remainingMs: Number(r.remaining_ms), ttlMs: Number(r.ttl_ms) };
  }

  async checkFence(name, fence) {
    const r = await this._unary('CheckFence', { name, fence: String(fence) });
    return r.current;
  }

  // Releases the leases still held (best effort), ends the stream, closes the channel.
  async close() {
    if (this._closed) return;
    this._closed = true;
    await Promise.allSettled([...this._leases].map((l) => l.release()));
    clearTimeout(this._beatTimer);
    this._endStream();
    this._stub.close();
  }

  _interval() {
    const ttls = [...this._leases].map((l) => l.ttlMs);
    return Math.max(50, Math.min(...ttls) / 3);
  }

  _scheduleBeat(delayMs) {
    if (this._beatTimer && this._nextBeat <= now() + delayMs) return; // an earlier one is due
    clearTimeout(this._beatTimer);
    this._nextBeat = now() + delayMs;
    this._beatTimer = setTimeout(() => { this._beatTimer = null; this._beat(); }, delayMs);
  }

  _beat() {
    if (this._closed || this._leases.size === 0) return this._endStream(); // no lease left: a clean end
    const interval = this._interval();
    // A heartbeat unanswered for two intervals means a stalled stream: start over.
    const oldest = Math.min(...[...this._pending.values()].map((p) => p.sent));
    if (now() - oldest > 2 * interval) this._endStream(true);
    if (!this._stream) this._openStream();
    const leases = [...this._leases];
    const seq = ++this._seq;
    this._pending.set(seq, { sent: now(), leases });
    this._stream.write({ seq, leases: leases.map((l) => ({ name: l.name, owner_token: l.ownerToken, ttl_ms: 0 })) });
    this._scheduleBeat(interval);
  }

  _openStream() {
    const stream = this._stub.KeepAlive(this._metadata());
    this._stream = stream;
    stream.on('data', (res) => { if (this._stream === stream) this._apply(res); });
    stream.on('error', () => {}); // reported through 'status' below as well
    stream.on('status', () => {
      if (this._stream !== stream) return; // an abandoned stream
      this._stream = null;
      this._pending.clear();
      if (this._leases.size === 0) return;
      // Reopen soon enough to resume the leases before their deadlines: never
      // later than a heartbeat interval, jittered so clients do not reconnect in lockstep.
      const delay = Math.min(this._backoff * (0.5 + Math.random()), this._interval());
      this._backoff = Math.min(this._backoff * 2, 2000);
      clearTimeout(this._beatTimer);
      this._beatTimer = null;
      this._scheduleBeat(delay);
    });
  }

  _endStream(cancel = false) {
    const stream = this._stream;
    this._stream = null;
    this._pending.clear();
    if (stream) cancel ? stream.cancel() : stream.end(); // half-close after releasing is not a loss
  }

  _apply(res) {
    const entry = this._pending.get(Number(res.seq));
    if (!entry) return;
    // Answers come in order: older heartbeats still pending got none.
    for (const seq of this._pending.keys()) if (seq <= Number(res.seq)) this._pending.delete(seq);
    this._backoff = MIN_BACKOFF_MS;
    res.leases.forEach((st, i) => {
      const lease = entry.leases[i];
      if (!lease || lease.name !== st.name) return;
      if (st.state === 'STATE_ALIVE') lease._renewed(entry.sent, Number(st.ttl_ms));
      else if (st.state === 'STATE_REJECTED') this._lose(lease, 'REJECTED', st.message);
      else if (st.state === 'STATE_LOST') {
        // The proto's LOSS_REASON_EXPIRED is this client's EXPIRED, and so on.
        const given = st.reason.replace(/^LOSS_REASON_/, '');
        // EXPIRED before our own (early) deadline cannot be an expiry: the store lost it.
        const reason = given === 'EXPIRED' && now() < lease.deadline ? 'STORE_LOST' : given;
        this._lose(lease, reason, st.message);
      }
      // STATE_UNCONFIRMED: the store did not answer; keep beating, the deadline decides.
    });
  }

  _lose(lease, reason, message) {
    this._leases.delete(lease);
    if (!lease._markLost(reason)) return;
    console.warn(`leasehold: lease ${lease.name} lost: ${reason} (${message})`);
    // Past our deadline the lease is useless to us: release it so the next
    // holder need not wait for the broker-side TTL (best effort, in the background).
    if (reason === 'DEADLINE_PASSED') this._unary('Release', { name: lease.name, owner_token: lease.ownerToken }, 2000).catch(() => {});
  }

  _forget(lease) {
    this._leases.delete(lease);
  }
}

// PEM given as a Buffer (or Uint8Array) is used as is; a string is a file path.
function pem(value, what) {
  if (value == null) return null;
  if (typeof value !== 'string') return Buffer.from(value);
  try {
    return readFileSync(value);
  } catch (err) {
    throw new Error(`cannot read ${what} ${value}: ${err.code ?? err.message}`); // the path, never the contents
  }
}

// Visible ASCII, no spaces: what a header value carries. Checked here so a bad
// token fails at once with a message that does not contain it.
function checkToken(token) {
  if (token == null) return null;
  if (typeof token !== 'string' || !/^[\x21-\x7e]+$/.test(token)) {
    throw new Error('token must be a non-empty string of visible ASCII without spaces (the token itself is not shown)');
  }
  return token;
}

// `target` is host:port, http://host:port or https://host:port (TLS, as the Rust CLI).
// Plaintext by default, as the broker serves it without --tls-cert. Options:
//   tls: true         TLS trusting the system's roots (implied by https://, ca or cert)
//   ca                CA certificates (PEM) the broker's certificate must chain to
//   cert, key         this client's certificate and key (PEM), for mutual TLS
//   serverName        the name the broker's certificate must carry, if not the target's host
//   token             a bearer token, sent as `authorization: Bearer <token>` on every call
// PEM values are Buffers, or strings naming files. The second argument may also
// be ready-made grpc.ChannelCredentials (the older form).
export function connect(target, options = {}) {
  if (options instanceof grpc.ChannelCredentials) return new Client(target, options, { tls: options._isSecure?.() ?? true });
  const { tls, ca, cert, key, serverName, token } = options;
  let scheme = null;
  const m = /^(https?):\/\//.exec(target);
  if (m) { scheme = m[1]; target = target.slice(m[0].length); }
  target = target.replace(/\/+$/, '');
  if ((cert == null) !== (key == null)) throw new Error('cert and key go together (mutual TLS needs both)');
  const secure = scheme === 'https' || tls === true || ca != null || cert != null;
  if (tls === false && secure) throw new Error('tls: false contradicts an https:// target, a CA or a client certificate');
  if (scheme === 'http' && secure) throw new Error('an http:// target is plaintext: use https:// (or no scheme) with TLS options');
  const credentials = secure
    ? grpc.credentials.createSsl(pem(ca, 'CA file'), pem(key, 'client key'), pem(cert, 'client certificate'))
    : grpc.credentials.createInsecure();
  return new Client(target, credentials, { token: checkToken(token), serverName, tls: secure });
}
