// Apache Curator's InterProcessMutex (the lock recipe of curator-recipes) on
// ZooKeeper, measured as `leasehold-bench cycles` measures the broker, the
// store layer, the plain Redis lock and etcd's lock service
// (bench/src/cycles.rs, bench/src/etcd.rs), so that its figures sit beside
// theirs in BENCHMARKS.md ("ZooKeeper and Curator's InterProcessMutex: the
// baseline"):
//
// - cycles: each worker (a thread) cycles acquire+release on a lock of its
//   own (`/bench/cycles/<pid>/<workers>/<w>`) for the duration; cycles/s is
//   the completed cycles over the duration; acquire latency (the acquire
//   call alone) p50/p99/p999 in µs, nearest rank on the sorted values
//   (bench/src/stats.rs). All workers share one CuratorFramework: one
//   ZooKeeper session over one connection, as the bench's default
//   `--connections shared` multiplexes one connection, and as etcd's side
//   shares one channel (each etcd worker has a lease of its own: here the
//   session is the lease, and there is one).
// - handoffs: N workers on one lock, each with an InterProcessMutex of its
//   own on the same path, waiting for it (10 s at a time, again if it runs
//   out), holding it for no time, releasing it. Handoffs/s is every grant
//   over the duration; handoff latency runs from a release to the next
//   grant to another worker than the releaser; fairness is the fewest over
//   the most grants per worker.
// - failover: a holder JVM (this program's `hold`, a session of its own)
//   takes the lock; after the session timeout plus 0-700 ms (it dies at a
//   random point of its ping period, as the bench's holder dies at a random
//   point of its heartbeat period), a waiter (on this process's session)
//   queues and is seen in line (two children under the lock), and the
//   holder is SIGKILLed (Process.destroyForcibly). Nothing tells ZooKeeper:
//   the lock node goes when the holder's session expires (the session
//   timeout, rounded up by ZooKeeper to its next tickTime), then the
//   waiter's watch fires. Timed: kill -> grant, and, when --zk-log names
//   the server's log, the server's "Expiring session 0x..." line -> grant.
//
// No Maven: bench/curator/run.sh compiles this against Debian's jars.

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.text.SimpleDateFormat;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.TimeZone;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorBench {
    // --- options -----------------------------------------------------------

    static String connect = "127.0.0.1:2181";
    static List<Integer> workers = List.of(1, 16, 64);
    static int waiters = 16;
    static long durationMs = 5_000;
    static long warmupMs = 1_000;
    static int kills = 3;
    static List<Long> failoverSessionsMs = List.of(2_000L, 10_000L);
    static long sessionMs = 10_000;
    static String lock = null;
    static String zkLog = null;
    static long zkPid = 0;

    static long parseDuration(String s) {
        s = s.trim();
        if (s.endsWith("ms")) return Long.parseLong(s.substring(0, s.length() - 2));
        if (s.endsWith("s")) return Math.round(Double.parseDouble(s.substring(0, s.length() - 1)) * 1000);
        return Long.parseLong(s);
    }

    static void usage(String why) {
        System.err.println("CuratorBench: " + why);
        System.err.println(
                "usage: CuratorBench cycles|handoffs|failover|all|hold --connect HOST:PORT\n"
                        + "  [--workers 1,16,64] [--waiters 16] [--duration 5s] [--warmup 1s]\n"
                        + "  [--kills 3] [--failover-sessions 2s,10s] [--session-timeout 10s]\n"
                        + "  [--zk-log FILE] [--zk-pid PID] [--lock PATH (hold)]\n"
                        + "       CuratorBench summarize RUN_OUTPUT...");
        System.exit(2);
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 0) usage("no subcommand");
        String command = args[0];
        if (command.equals("summarize")) {
            summarize(Arrays.asList(args).subList(1, args.length));
            return;
        }
        for (int i = 1; i < args.length; i++) {
            String flag = args[i];
            if (i + 1 >= args.length) usage(flag + " needs a value");
            String value = args[++i];
            switch (flag) {
                case "--connect": connect = value; break;
                case "--workers": workers = ints(value); break;
                case "--waiters": waiters = Integer.parseInt(value); break;
                case "--duration": durationMs = parseDuration(value); break;
                case "--warmup": warmupMs = parseDuration(value); break;
                case "--kills": kills = Integer.parseInt(value); break;
                case "--failover-sessions": {
                    List<Long> l = new ArrayList<>();
                    for (String p : value.split(",")) l.add(parseDuration(p));
                    failoverSessionsMs = l;
                    break;
                }
                case "--session-timeout": sessionMs = parseDuration(value); break;
                case "--lock": lock = value; break;
                case "--zk-log": zkLog = value; break;
                case "--zk-pid": zkPid = Long.parseLong(value); break;
                default: usage("unknown option " + flag);
            }
        }
        switch (command) {
            case "hold": hold(); return;
            case "cycles": case "handoffs": case "failover": case "all": break;
            default: usage("unknown subcommand " + command);
        }
        CuratorFramework client = client(sessionMs);
        try {
            System.out.printf("connect %s; session timeout asked %d ms, negotiated %d ms; %s%n",
                    connect, sessionMs, client.getZookeeperClient().getZooKeeper().getSessionTimeout(),
                    zkVersion());
            if (command.equals("cycles") || command.equals("all")) cycles(client);
            if (command.equals("handoffs") || command.equals("all")) handoffs(client);
            if (command.equals("failover") || command.equals("all")) failover(client);
        } finally {
            client.close();
        }
        System.exit(0);
    }

    static List<Integer> ints(String s) {
        List<Integer> l = new ArrayList<>();
        for (String p : s.split(",")) l.add(Integer.parseInt(p.trim()));
        return l;
    }

    /** A started client, connected: what a Curator user builds once per process. */
    static CuratorFramework client(long sessionTimeoutMs) throws InterruptedException {
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs((int) sessionTimeoutMs)
                .connectionTimeoutMs((int) Math.min(15_000, sessionTimeoutMs))
                .retryPolicy(new ExponentialBackoffRetry(1000, 3))
                .build();
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            throw new IllegalStateException("cannot connect to ZooKeeper at " + connect);
        }
        return client;
    }

    // --- measurements ------------------------------------------------------

    /** The p quantile by nearest rank on the sorted values (bench/src/stats.rs). */
    static long percentile(long[] sorted, double p) {
        if (sorted.length == 0) return 0;
        int rank = (int) (sorted.length * p);
        return sorted[Math.min(rank, sorted.length - 1)];
    }

    static final class Run {
        long cycles;
        long[] latenciesUs = new long[0];

        String tail() {
            long[] s = latenciesUs.clone();
            Arrays.sort(s);
            return percentile(s, 0.5) + "/" + percentile(s, 0.99) + "/" + percentile(s, 0.999);
        }
    }

    /** A growable array of longs, one per worker thread. */
    static final class Longs {
        long[] values = new long[1024];
        int n;

        void add(long v) {
            if (n == values.length) values = Arrays.copyOf(values, n * 2);
            values[n++] = v;
        }
    }

    static long micros(long nanos) {
        return nanos / 1_000;
    }

    /** CPU (ns) used so far by this JVM and by the ZooKeeper server (--zk-pid; -1 if unknown). */
    static long[] cpu() {
        long self = ProcessHandle.current().info().totalCpuDuration().map(d -> d.toNanos()).orElse(-1L);
        long zk = -1;
        if (zkPid > 0) {
            Optional<ProcessHandle> h = ProcessHandle.of(zkPid);
            if (h.isPresent()) zk = h.get().info().totalCpuDuration().map(d -> d.toNanos()).orElse(-1L);
        }
        return new long[] {self, zk};
    }

    /** A four-letter word's answer from the server of --connect's first member. */
    static String fourLetterWord(String word) {
        String first = connect.split(",")[0];
        int colon = first.lastIndexOf(':');
        String host = colon < 0 ? first : first.substring(0, colon);
        int port = colon < 0 ? 2181 : Integer.parseInt(first.substring(colon + 1));
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(host, port), 2_000);
            s.setSoTimeout(2_000);
            OutputStream out = s.getOutputStream();
            out.write(word.getBytes(StandardCharsets.US_ASCII));
            out.flush();
            return new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            return "";
        }
    }

    static String zkVersion() {
        for (String line : fourLetterWord("srvr").split("\n")) {
            if (line.startsWith("Zookeeper version:")) return "ZooKeeper " + line.substring(18).trim();
        }
        return "ZooKeeper version unknown (srvr not answered)";
    }

    /** Requests the server has received (mntr's zk_packets_received; -1 if not allowed). */
    static long packetsReceived() {
        for (String line : fourLetterWord("mntr").split("\n")) {
            String[] kv = line.split("\t");
            if (kv.length == 2 && kv[0].equals("zk_packets_received")) return Long.parseLong(kv[1].trim());
        }
        return -1;
    }

    static Run uncontended(CuratorFramework client, int n, long durationMs, String tag) throws Exception {
        long end = System.nanoTime() + durationMs * 1_000_000;
        long pid = ProcessHandle.current().pid();
        Thread[] threads = new Thread[n];
        long[] counts = new long[n];
        Longs[] lat = new Longs[n];
        Throwable[] failed = new Throwable[1];
        for (int w = 0; w < n; w++) {
            final int worker = w;
            lat[w] = new Longs();
            InterProcessMutex mutex = new InterProcessMutex(client, "/bench/cycles/" + pid + "/" + tag + n + "/" + w);
            threads[w] = new Thread(() -> {
                try {
                    while (System.nanoTime() < end) {
                        long started = System.nanoTime();
                        mutex.acquire();
                        lat[worker].add(micros(System.nanoTime() - started));
                        mutex.release();
                        counts[worker]++;
                    }
                } catch (Throwable e) {
                    synchronized (failed) {
                        failed[0] = e;
                    }
                }
            });
            threads[w].start();
        }
        for (Thread t : threads) t.join();
        if (failed[0] != null) throw new RuntimeException("uncontended worker failed", failed[0]);
        Run run = new Run();
        int total = 0;
        for (int w = 0; w < n; w++) {
            run.cycles += counts[w];
            total += lat[w].n;
        }
        run.latenciesUs = new long[total];
        int at = 0;
        for (Longs l : lat) {
            System.arraycopy(l.values, 0, run.latenciesUs, at, l.n);
            at += l.n;
        }
        return run;
    }

    static void cycles(CuratorFramework client) throws Exception {
        if (warmupMs > 0) {
            // The JVM's JIT and Curator's classes: the load generator in Rust
            // is compiled ahead; this run is not reported.
            uncontended(client, 1, warmupMs, "warmup");
        }
        System.out.printf("%-24s %12s %s%n", "scenario", "cycles/s", "(Curator InterProcessMutex on ZooKeeper)");
        for (int n : workers) {
            String label = "uncontended, " + n + " workers";
            long packets = packetsReceived();
            long[] before = cpu();
            Run run = uncontended(client, n, durationMs, "");
            long[] after = cpu();
            long packetsAfter = packetsReceived();
            double perS = run.cycles / (durationMs / 1000.0);
            String requests = packets < 0 || packetsAfter < 0 ? "-"
                    : String.format(Locale.ROOT, "%.2f", (packetsAfter - packets) / (double) Math.max(1, run.cycles));
            String zkCpu = before[1] < 0 || after[1] < 0 ? "-"
                    : String.format(Locale.ROOT, "%.1f", (after[1] - before[1]) / 1e3 / Math.max(1, run.cycles));
            System.out.printf(Locale.ROOT,
                    "%-24s %12.0f cycles/s with Curator's InterProcessMutex; acquire p50/p99/p999 %s µs; "
                            + "ZooKeeper requests per cycle %s; CPU µs per cycle: ZooKeeper %s + load generator %.1f%n",
                    label, perS, run.tail(), requests, zkCpu,
                    (after[0] - before[0]) / 1e3 / Math.max(1, run.cycles));
        }
    }

    /** Handoffs of one lock (bench/src/cycles.rs `Handoffs`). */
    static final class Handoffs {
        long lastRelease = -1;
        int lastBy = -1;
        final Longs samplesUs = new Longs();

        synchronized void granted(int worker) {
            long now = System.nanoTime();
            if (lastRelease >= 0 && lastBy != worker) samplesUs.add(micros(now - lastRelease));
        }

        synchronized void releasing(int worker) {
            lastRelease = System.nanoTime();
            lastBy = worker;
        }
    }

    static void handoffs(CuratorFramework client) throws Exception {
        if (waiters <= 0) return;
        String label = "one lock, " + waiters + " waiters";
        String path = "/bench/contended/" + ProcessHandle.current().pid();
        long end = System.nanoTime() + durationMs * 1_000_000;
        Handoffs handoffs = new Handoffs();
        long[] grants = new long[waiters];
        Thread[] threads = new Thread[waiters];
        Throwable[] failed = new Throwable[1];
        long packets = packetsReceived();
        long[] before = cpu();
        for (int w = 0; w < waiters; w++) {
            final int worker = w;
            InterProcessMutex mutex = new InterProcessMutex(client, path);
            threads[w] = new Thread(() -> {
                try {
                    while (System.nanoTime() < end) {
                        // A wait that ran out: wait again.
                        if (!mutex.acquire(10, TimeUnit.SECONDS)) continue;
                        handoffs.granted(worker);
                        grants[worker]++;
                        handoffs.releasing(worker);
                        mutex.release();
                    }
                } catch (Throwable e) {
                    synchronized (failed) {
                        failed[0] = e;
                    }
                }
            });
            threads[w].start();
        }
        for (Thread t : threads) t.join();
        long[] after = cpu();
        long packetsAfter = packetsReceived();
        if (failed[0] != null) throw new RuntimeException("contended worker failed", failed[0]);
        long total = 0, min = Long.MAX_VALUE, max = 0;
        for (long g : grants) {
            total += g;
            min = Math.min(min, g);
            max = Math.max(max, g);
        }
        long[] s = Arrays.copyOf(handoffs.samplesUs.values, handoffs.samplesUs.n);
        Arrays.sort(s);
        double secs = durationMs / 1000.0;
        String requests = packets < 0 || packetsAfter < 0 ? "-"
                : String.format(Locale.ROOT, "%.2f", (packetsAfter - packets) / (double) Math.max(1, total));
        String zkCpu = before[1] < 0 || after[1] < 0 ? "-"
                : String.format(Locale.ROOT, "%.1f", (after[1] - before[1]) / 1e3 / Math.max(1, total));
        System.out.printf(Locale.ROOT,
                "%-24s %12.0f handoffs/s (%.0f/s to another worker); handoff p50/p99 %d/%d µs; "
                        + "grants per worker min/max %d/%d (%.2f); ZooKeeper requests per grant %s; "
                        + "CPU µs per grant: ZooKeeper %s + load generator %.1f%n",
                label + ", Curator", total / secs, s.length / secs, percentile(s, 0.5), percentile(s, 0.99),
                min, max, min / (double) Math.max(1, max), requests, zkCpu,
                (after[0] - before[0]) / 1e3 / Math.max(1, total));
    }

    // --- failover ----------------------------------------------------------

    /** `hold`: takes --lock on a session of --session-timeout, says so, and holds it until killed. */
    static void hold() throws Exception {
        if (lock == null) usage("hold needs --lock");
        CuratorFramework client = client(sessionMs);
        InterProcessMutex mutex = new InterProcessMutex(client, lock);
        mutex.acquire();
        long session = client.getZookeeperClient().getZooKeeper().getSessionId();
        int negotiated = client.getZookeeperClient().getZooKeeper().getSessionTimeout();
        System.out.println("granted 0x" + Long.toHexString(session) + " " + negotiated);
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }

    static final SimpleDateFormat LOG_TIME = new SimpleDateFormat("yyyy-MM-dd HH:mm:ss.SSS", Locale.ROOT);

    static {
        LOG_TIME.setTimeZone(TimeZone.getTimeZone("UTC"));
    }

    /**
     * When the server expired `session` (wall clock ms), from its log's
     * "Expiring session 0x..." line (slf4j-simple with
     * -Dorg.slf4j.simpleLogger.dateTimeFormat='yyyy-MM-dd HH:mm:ss.SSS', in
     * UTC: run.sh starts the server so); -1 when not found.
     */
    static long expiredAt(String session) throws Exception {
        if (zkLog == null) return -1;
        String needle = "Expiring session " + session + ",";
        for (int tries = 0; tries < 50; tries++) {
            for (String line : Files.readAllLines(Path.of(zkLog), StandardCharsets.UTF_8)) {
                int at = line.indexOf(needle);
                if (at >= 0 && line.length() >= 23) {
                    return LOG_TIME.parse(line.substring(0, 23)).getTime();
                }
            }
            Thread.sleep(20);
        }
        return -1;
    }

    static void failover(CuratorFramework client) throws Exception {
        if (kills <= 0) return;
        String java = ProcessHandle.current().info().command().orElse("java");
        String classpath = System.getProperty("java.class.path");
        long pid = ProcessHandle.current().pid();
        for (long session : failoverSessionsMs) {
            List<String> killToGrant = new ArrayList<>();
            List<String> expiryToGrant = new ArrayList<>();
            List<String> killToExpiry = new ArrayList<>();
            int negotiated = -1;
            for (int run = 0; run < kills; run++) {
                String name = "/bench/failover/" + pid + "/" + session + "/" + run;
                Process holder = new ProcessBuilder(java, "-Xmx64m", "-cp", classpath,
                        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "CuratorBench", "hold",
                        "--connect", connect, "--lock", name, "--session-timeout", session + "ms")
                        .redirectError(ProcessBuilder.Redirect.INHERIT)
                        .start();
                BufferedReader lines = new BufferedReader(new InputStreamReader(holder.getInputStream(), StandardCharsets.UTF_8));
                String line = lines.readLine();
                if (line == null || !line.startsWith("granted ")) {
                    holder.destroyForcibly();
                    throw new IllegalStateException("the holder did not get the lock: " + line);
                }
                String[] granted = line.split(" ");
                String holderSession = granted[1];
                negotiated = Integer.parseInt(granted[2]);
                // Let it ping a few times, so that it dies at a random point of
                // its ping period, as a real holder would.
                Thread.sleep(negotiated + ThreadLocalRandom.current().nextLong(700));
                InterProcessMutex mutex = new InterProcessMutex(client, name);
                long waitMs = 3L * negotiated + 5_000;
                long[] grantedAt = new long[2];
                Throwable[] failed = new Throwable[1];
                Thread waiter = new Thread(() -> {
                    try {
                        if (mutex.acquire(waitMs, TimeUnit.MILLISECONDS)) {
                            grantedAt[0] = System.nanoTime();
                            grantedAt[1] = System.currentTimeMillis();
                            // An InterProcessMutex is released by the thread that holds it.
                            mutex.release();
                        }
                    } catch (Throwable e) {
                        failed[0] = e;
                    }
                });
                waiter.start();
                // The waiter is in line before the kill: its node beside the holder's.
                while (client.getChildren().forPath(name).size() < 2) Thread.sleep(2);
                holder.destroyForcibly();
                long killed = System.nanoTime();
                holder.waitFor();
                waiter.join();
                if (failed[0] != null) throw new RuntimeException("the waiter failed", failed[0]);
                if (grantedAt[0] == 0) throw new IllegalStateException("the waiter was not granted");
                killToGrant.add(String.valueOf((grantedAt[0] - killed) / 1_000_000));
                long expired = expiredAt(holderSession);
                if (expired < 0) {
                    expiryToGrant.add("-");
                    killToExpiry.add("-");
                } else {
                    expiryToGrant.add(String.valueOf(grantedAt[1] - expired));
                    // The kill by the wall clock: the grant's wall time minus kill -> grant.
                    long killedWall = grantedAt[1] - (grantedAt[0] - killed) / 1_000_000;
                    killToExpiry.add(String.valueOf(expired - killedWall));
                }
            }
            System.out.printf("%-24s kill -9 -> next grant %s ms; session expiry -> grant %s ms; kill -> expiry %s ms "
                            + "(session timeout %d ms)%n",
                    "holder killed, Curator", String.join(" / ", killToGrant), String.join(" / ", expiryToGrant),
                    String.join(" / ", killToExpiry), negotiated);
        }
    }

    // --- summarize ---------------------------------------------------------

    static final Pattern CYCLES = Pattern.compile(
            "^uncontended, (\\d+) workers\\s+(\\d+) cycles/s .*acquire p50/p99/p999 (\\d+)/(\\d+)/(\\d+) µs; "
                    + "ZooKeeper requests per cycle ([0-9.]+|-); CPU µs per cycle: ZooKeeper ([0-9.]+|-) \\+ load generator ([0-9.]+)");
    static final Pattern HANDOFFS = Pattern.compile(
            "^one lock, (\\d+) waiters, Curator\\s+(\\d+) handoffs/s \\((\\d+)/s to another worker\\); handoff p50/p99 (\\d+)/(\\d+) µs; "
                    + "grants per worker min/max \\d+/\\d+ \\(([0-9.]+)\\); ZooKeeper requests per grant ([0-9.]+|-)");
    static final Pattern FAILOVER = Pattern.compile(
            "^holder killed, Curator\\s+kill -9 -> next grant (.*) ms; session expiry -> grant (.*) ms; kill -> expiry (.*) ms \\(session timeout (\\d+) ms\\)");

    /** min / median / max of each figure over the runs (of every kill, for a killed holder). */
    static void summarize(List<String> files) throws IOException {
        Map<String, List<Double>> figures = new LinkedHashMap<>();
        for (String file : files) {
            for (String line : Files.readAllLines(Path.of(file), StandardCharsets.UTF_8)) {
                Matcher m = CYCLES.matcher(line);
                if (m.find()) {
                    String w = m.group(1) + " workers";
                    add(figures, w + ": cycles/s", m.group(2));
                    add(figures, w + ": acquire p50 (µs)", m.group(3));
                    add(figures, w + ": acquire p99 (µs)", m.group(4));
                    add(figures, w + ": acquire p999 (µs)", m.group(5));
                    add(figures, w + ": ZooKeeper requests per cycle", m.group(6));
                    add(figures, w + ": ZooKeeper CPU per cycle (µs)", m.group(7));
                    add(figures, w + ": load generator CPU per cycle (µs)", m.group(8));
                    continue;
                }
                m = HANDOFFS.matcher(line);
                if (m.find()) {
                    String w = "one lock, " + m.group(1) + " waiters";
                    add(figures, w + ": handoffs/s", m.group(2));
                    add(figures, w + ": to another worker/s", m.group(3));
                    add(figures, w + ": handoff p50 (µs)", m.group(4));
                    add(figures, w + ": handoff p99 (µs)", m.group(5));
                    add(figures, w + ": fairness (fewest / most grants)", m.group(6));
                    add(figures, w + ": ZooKeeper requests per grant", m.group(7));
                    continue;
                }
                m = FAILOVER.matcher(line);
                if (m.find()) {
                    String w = "holder killed (session " + m.group(4) + " ms)";
                    for (String v : m.group(1).split(" / ")) add(figures, w + ": kill -9 -> grant (ms)", v);
                    for (String v : m.group(2).split(" / ")) add(figures, w + ": session expiry -> grant (ms)", v);
                    for (String v : m.group(3).split(" / ")) add(figures, w + ": kill -> session expiry (ms)", v);
                }
            }
        }
        System.out.printf("%-60s %s%n", "figure (" + files.size() + " runs)", "min / median / max (n)");
        for (Map.Entry<String, List<Double>> e : figures.entrySet()) {
            List<Double> v = e.getValue();
            Collections.sort(v);
            double median = v.size() % 2 == 1 ? v.get(v.size() / 2)
                    : (v.get(v.size() / 2 - 1) + v.get(v.size() / 2)) / 2;
            System.out.printf(Locale.ROOT, "%-60s %s / %s / %s (%d)%n", e.getKey(), fmt(v.get(0)), fmt(median),
                    fmt(v.get(v.size() - 1)), v.size());
        }
    }

    static void add(Map<String, List<Double>> figures, String key, String value) {
        if (value.equals("-")) return;
        figures.computeIfAbsent(key, k -> new ArrayList<>()).add(Double.parseDouble(value));
    }

    static String fmt(double v) {
        return v == Math.rint(v) && Math.abs(v) < 1e15 ? String.valueOf((long) v) : String.format(Locale.ROOT, "%.2f", v);
    }
}
