// What the tests share: a real broker (`leasehold serve`, the memory store or
// a redis-server), a real redis-server and a real PostgreSQL, each on a free
// loopback port, a TCP proxy that delays what it carries (a slow network),
// and `eventually` for conditions that no event announces.
// The broker binary is $LEASEHOLD_BIN, or target/debug/leasehold of this checkout.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const BIN = process.env.LEASEHOLD_BIN || fileURLToPath(new URL('../../../target/debug/leasehold', import.meta.url));
export const MIN_TTL = 500; // the broker's minimum TTL
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let unique = 0;
export const lockName = (what) => `node-test/${what}/${process.pid}-${++unique}`;

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

// Sends `probe` (if any) and resolves with the first bytes answered ('' when
// there is no probe), or null if the port does not accept connections.
function poke(port, probe) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    sock.once('connect', () => {
      if (!probe) { sock.destroy(); resolve(''); return; }
      sock.write(probe);
      sock.once('data', (d) => { sock.destroy(); resolve(String(d)); });
    });
    sock.once('error', () => resolve(null));
    sock.setTimeout(2000, () => { sock.destroy(); resolve(null); });
  });
}

// SIGSTOP to `proc` (a ChildProcess), resolved once every thread of it is
// stopped: kill() returns before a thread running on another CPU has taken
// the signal, and a request sent in between could still be answered.
export async function stopProcess(proc, what = `process ${proc.pid}`) {
  proc.kill('SIGSTOP');
  const tasks = `/proc/${proc.pid}/task`;
  if (!existsSync(tasks)) return sleep(200); // no /proc: time for the signal to land
  const stopped = () => readdirSync(tasks).every((t) => {
    try { return /^\d+ \(.*\) [Tt]/.test(readFileSync(`${tasks}/${t}/stat`, 'utf8')); } catch { return true; } // a thread that exited
  });
  const end = Date.now() + 5000;
  while (!stopped()) {
    if (Date.now() > end) throw new Error(`${what} not stopped within 5 s of SIGSTOP`);
    await sleep(5);
  }
}

// A child process, killed (SIGKILL: no clean shutdown) by kill().
function child(command, args, ready, what, spawnOptions = {}) {
  const proc = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], ...spawnOptions });
  let output = '';
  proc.stdout.on('data', (d) => (output += d));
  proc.stderr.on('data', (d) => (output += d));
  let gone = null;
  const exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve((gone = { code, signal }))));
  // A test that failed before its cleanup leaves no process behind.
  const reap = () => { if (!gone) proc.kill('SIGKILL'); };
  process.once('exit', reap);
  exited.then(() => process.removeListener('exit', reap));
  const started = (async () => {
    const end = Date.now() + 20_000;
    // Polling is for startup only: nothing else says when the port is ready.
    while (!(await ready())) {
      if (gone) throw new Error(`${what} exited (${JSON.stringify(gone)}): ${output}`);
      if (Date.now() > end) { proc.kill('SIGKILL'); throw new Error(`${what} not ready within 20 s: ${output}`); }
      await sleep(20);
    }
  })();
  return {
    started,
    exited,
    output: () => output,
    signal(name) { if (!gone) proc.kill(name); },
    async kill() {
      if (!gone) { proc.kill('SIGKILL'); await exited; }
    },
    // SIGSTOP and SIGCONT: a broker that answers nothing for a while (a
    // stopped process keeps its connections open), then goes on. pause()
    // resolves once every thread is stopped: kill() returns before a thread
    // running on another CPU has taken the signal, and a request sent in
    // between could still be answered.
    async pause() {
      if (gone) return;
      await stopProcess(proc, what);
    },
    resume() { if (!gone) proc.kill('SIGCONT'); },
    // SIGTERM, and the exit: a graceful shutdown (a rolling restart). Throws
    // unless it exits cleanly within 20 s.
    async terminate() {
      if (gone) return;
      proc.kill('SIGTERM');
      let timer;
      const late = new Promise((resolve) => { timer = setTimeout(resolve, 20_000); });
      const end = await Promise.race([exited, late]);
      clearTimeout(timer);
      if (!end) { proc.kill('SIGKILL'); throw new Error(`${what} did not exit within 20 s of SIGTERM: ${output}`); }
      if (end.code !== 0) throw new Error(`${what} exited with ${JSON.stringify(end)} after SIGTERM: ${output}`);
    },
  };
}

// Starts a broker (the memory store unless `store` names another, and more
// `serve` flags, if given) and waits until its port accepts connections.
export async function startBroker(args = [], { store = 'memory' } = {}) {
  if (!existsSync(BIN)) throw new Error(`broker binary not found at ${BIN}: build it (cargo build --bin leasehold) or set LEASEHOLD_BIN`);
  const port = await freePort();
  const metricsPort = await freePort();
  const address = `127.0.0.1:${port}`;
  const proc = child(BIN, ['serve', '--store', store, '--listen', address, '--metrics-listen', `127.0.0.1:${metricsPort}`, ...args],
    async () => (await poke(port)) !== null, `broker on ${address}`);
  await proc.started;
  return {
    address,
    port,
    kill: async () => { proc.resume(); await proc.kill(); },
    terminate: proc.terminate,
    pause: proc.pause,
    resume: proc.resume,
    output: proc.output,
    // The broker's /metrics page (Prometheus text format).
    metrics: () => new Promise((resolve, reject) => {
      http.get(`http://127.0.0.1:${metricsPort}/metrics`, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d) => (body += d));
        res.on('end', () => resolve(body));
      }).on('error', reject);
    }),
  };
}

// A redis-server without persistence, for brokers that share a store.
// Without one on the PATH the caller skips, except in CI (CI=true), where a
// missing redis-server fails the run rather than hide the tests.
export function haveRedis() {
  if (spawnSync('redis-server', ['--version']).status === 0) return true;
  if (process.env.CI === 'true') throw new Error('redis-server is not on the PATH (scripts/test installs it)');
  return false;
}

export async function startRedis() {
  const port = await freePort();
  const proc = child('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    async () => ((await poke(port, 'PING\r\n')) ?? '').startsWith('+PONG'), `redis-server on port ${port}`);
  await proc.started;
  return { url: `redis://127.0.0.1:${port}/`, port, kill: proc.kill };
}

// Waits until `condition()` (sync or async) is truthy, checking every 20 ms,
// for at most `timeoutMs`: for states that no event announces (a waiter
// queued on the broker).
export async function eventually(condition, what, timeoutMs = 10_000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const value = await condition();
    if (value) return value;
    if (Date.now() > end) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await sleep(20);
  }
}

// A stand-in for a broker from before the Session RPC: a gRPC server that
// forwards the unary calls and the KeepAlive stream to `target` (a real
// broker) and answers Session with UNIMPLEMENTED, as a server without the
// method does. `sessionCalls()` counts the Session streams it refused.
export async function olderBroker(target) {
  const grpc = await import('@grpc/grpc-js');
  const protoLoader = await import('@grpc/proto-loader');
  const { PROTO_DIR } = await import('@leasehold/client');
  const definition = protoLoader.loadSync('leasehold/v1/leasehold.proto', { includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: String, defaults: true });
  const Service = grpc.loadPackageDefinition(definition).leasehold.v1.LeaseholdService;
  const upstream = new Service(target, grpc.credentials.createInsecure());
  let sessionCalls = 0;
  const handlers = {};
  for (const [name, method] of Object.entries(Service.service)) {
    if (!method.requestStream && !method.responseStream) {
      handlers[name] = (call, callback) => {
        const up = upstream[name](call.request, (err, res) => callback(err, res)); // the error's code, details and trailers (leasehold-place)
        call.on('cancelled', () => up.cancel());
      };
    } else if (name === 'KeepAlive') {
      handlers[name] = (call) => {
        const up = upstream[name]();
        call.on('data', (d) => up.write(d));
        call.on('end', () => up.end());
        call.on('cancelled', () => up.cancel());
        call.on('error', () => {});
        up.on('data', (d) => call.write(d));
        up.on('error', () => {});
        up.on('status', (st) => (st.code === grpc.status.OK ? call.end() : call.emit('error', st)));
      };
    } else if (name === 'Session') {
      handlers[name] = (call) => {
        sessionCalls += 1;
        call.on('error', () => {});
        call.emit('error', { code: grpc.status.UNIMPLEMENTED, details: 'Method not found: leasehold.v1.LeaseholdService/Session' });
      };
    }
  }
  const server = new grpc.Server();
  server.addService(Service.service, handlers);
  const port = await new Promise((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
  return {
    address: `127.0.0.1:${port}`,
    sessionCalls: () => sessionCalls,
    close: () => { server.forceShutdown(); upstream.close(); },
  };
}

// A real PostgreSQL for the fence guards: initdb in a temp dir and `postgres`
// on a free loopback port (trust authentication, user postgres, no fsync),
// from $LEASEHOLD_PG_BIN, else Debian's postgresql package
// (/usr/lib/postgresql/<version>/bin; the newest if several). As root both run as the postgres user, which owns the
// temp dir (PostgreSQL refuses to run as root). Without the package the
// caller skips, except in CI (CI=true: run-tests.sh installs it).
// stop() shuts it down (fast shutdown) and removes the dir.
export function postgresBin() {
  if (process.env.LEASEHOLD_PG_BIN) return process.env.LEASEHOLD_PG_BIN;
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).filter((v) => existsSync(join(root, v, 'bin', 'postgres'))).sort((a, b) => Number(b) - Number(a)) : [];
  if (versions.length > 0) return join(root, versions[0], 'bin');
  if (process.env.CI === 'true') throw new Error(`no PostgreSQL server under ${root} (run-tests.sh installs Debian's postgresql)`);
  return null;
}

export async function startPostgres() {
  const bin = postgresBin();
  if (!bin) throw new Error('no PostgreSQL server installed (apt-get install postgresql)');
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-node-pg-'));
  const as = {};
  if (process.getuid?.() === 0) {
    as.uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    as.gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(dir, as.uid, as.gid);
  }
  // A run that ends without stop() (a failed hook, a crash) leaves no dir behind.
  const remove = () => rmSync(dir, { recursive: true, force: true });
  process.once('exit', remove);
  const env = { ...process.env, LC_ALL: 'C', LANG: 'C' };
  const data = join(dir, 'data');
  const init = spawnSync(join(bin, 'initdb'), ['-D', data, '-A', 'trust', '-U', 'postgres', '-E', 'UTF8', '--locale=C', '--no-sync'], { ...as, env, encoding: 'utf8' });
  if (init.status !== 0) {
    remove();
    throw new Error(`initdb failed (${init.status ?? init.signal}): ${init.stdout}${init.stderr}`);
  }
  const port = await freePort();
  const { default: pg } = await import('pg');
  const config = { host: '127.0.0.1', port, user: 'postgres', database: 'postgres' };
  // Ready when a query is answered (the port opens before recovery ends).
  const ready = async () => {
    const c = new pg.Client(config);
    c.on('error', () => {});
    try { await c.connect(); await c.query('SELECT 1'); return true; } catch { return false; } finally { await c.end().catch(() => {}); }
  };
  const proc = child(join(bin, 'postgres'), ['-D', data, '-p', String(port), '-k', dir, '-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off', '-c', 'full_page_writes=off'],
    ready, `postgres on port ${port}`, { ...as, env });
  try {
    await proc.started;
  } catch (err) {
    remove();
    throw err;
  }
  return {
    config,
    port,
    output: proc.output,
    async stop() {
      proc.signal('SIGINT'); // fast shutdown: ends the sessions, no checkpoint wait
      let timer;
      const late = new Promise((resolve) => { timer = setTimeout(resolve, 20_000); });
      const end = await Promise.race([proc.exited, late]);
      clearTimeout(timer);
      if (!end) await proc.kill();
      remove();
    },
  };
}

// A TCP proxy to `target` (host:port) that holds each chunk, both ways, for
// `delayMs` before passing it on, in order: a network with that much latency
// each way (a round trip gains twice it). setDelay() changes it for chunks
// that arrive from then on. close() ends the connections and the listener.
export async function delayingProxy(target, delayMs) {
  const at = target.lastIndexOf(':');
  const host = target.slice(0, at);
  const port = Number(target.slice(at + 1));
  let delay = delayMs;
  const sockets = new Set();
  const forward = (from, to) => {
    const queue = [];
    let timer = null;
    let ended = false;
    const pump = () => {
      timer = null;
      const t = performance.now();
      while (queue.length > 0 && queue[0].at <= t) to.write(queue.shift().chunk);
      if (queue.length > 0) timer = setTimeout(pump, queue[0].at - t);
      else if (ended) to.end();
    };
    from.on('data', (chunk) => {
      queue.push({ at: performance.now() + delay, chunk });
      if (!timer) timer = setTimeout(pump, delay);
    });
    from.on('end', () => { ended = true; if (!timer) pump(); });
    from.on('close', () => { if (!ended) { clearTimeout(timer); to.destroy(); } });
    from.on('error', () => {});
  };
  const server = net.createServer((down) => {
    const up = net.connect(port, host);
    for (const s of [down, up]) { sockets.add(s); s.on('close', () => sockets.delete(s)); s.setNoDelay(true); }
    forward(down, up);
    forward(up, down);
  });
  await new Promise((resolve, reject) => server.listen(0, '127.0.0.1', resolve).on('error', reject));
  return {
    address: `127.0.0.1:${server.address().port}`,
    setDelay(ms) { delay = ms; },
    close() {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
