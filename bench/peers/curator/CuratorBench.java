// CuratorBench runs the comparison's workloads (W1-W8, bench/peers/README.md)
// with Apache Curator's InterProcessReadWriteLock, as a Curator user would
// write them: one CuratorFramework per client session, one lock object per
// client, reused.
//
//   java -cp BUILD:JARS CuratorBench CONNECT_STRING WORKLOAD...
//
// bench/peers/peer.sh compiles it on first use against Debian's jars in
// /usr/share/java and runs it. For each workload it prints one JSON line on
// stdout (impl "curator"), with an "error" key if the workload failed, and
// exits 1 at the end if one did. RWBENCH_OPS, RWBENCH_WARMUP, RWBENCH_SECONDS,
// RWBENCH_WAITERS, RWBENCH_BURSTS and RWBENCH_W9 (clients,locks) shrink the
// workloads for smoke tests; the workload names then say so (W1-smoke, W6-5).

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMultiLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.CreateMode;

public final class CuratorBench {
    // The workload constants (bench/peers/README.md).
    static final int SESSION_TIMEOUT_MS = 10_000;
    static final int CONNECT_TIMEOUT_S = 30;
    static final int CONTENDERS = 8;
    static final long ACQUIRE_TIMEOUT_MS = 2_000;
    static final long WAITER_TIMEOUT_S = 90;
    static final long WATCH_TIMEOUT_NS = 30_000_000_000L;
    static final double READ_SHARE = 0.9;
    static final long HOLD_MS = 1;
    static final int MNTR_TIMEOUT_MS = 5_000;
    static final long POLL_MS = 10;
    static final long WATCHDOG_MS = 300_000; // one workload, through a slow proxy included
    static final long W9_WATCHDOG_MS = 900_000; // W9's warm-up is 64,000 lock cycles
    static final long CLOSE_TIMEOUT_MS = 60_000;

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: CuratorBench CONNECT_STRING WORKLOAD...  (W1 W2 W3 W4 W5 W6 W6r W7 W8 W9 W11)");
            System.exit(2);
        }
        Sizes sizes = Sizes.fromEnv();
        boolean failed = false;
        for (int i = 1; i < args.length; i++) {
            CuratorBench b = new CuratorBench(args[0], sizes);
            Record r = b.run(args[i]);
            System.out.println(r.json());
            System.out.flush();
            b.closeClients(); // after printing: closing is slow and not measured
            failed |= r.has("error");
        }
        // Curator and the ZooKeeper client leave non-daemon threads behind.
        Runtime.getRuntime().halt(failed ? 1 : 0);
    }

    /** A run's parameters: the standard ones unless the environment shrinks them. */
    record Sizes(int ops, int warmup, long durationNs, int waiters, int bursts, int w9Clients, int w9Locks) {
        static final Sizes STANDARD = new Sizes(2000, 100, 5_000_000_000L, 200, 200, 64, 1000);

        static Sizes fromEnv() {
            String w9 = System.getenv("RWBENCH_W9"); // clients,locks
            String[] cl = w9 == null || w9.isEmpty()
                    ? new String[] {"" + STANDARD.w9Clients, "" + STANDARD.w9Locks} : w9.split(",");
            if (cl.length != 2) throw new IllegalArgumentException("RWBENCH_W9=" + w9 + ": want clients,locks");
            return new Sizes(
                    (int) env("RWBENCH_OPS", STANDARD.ops),
                    (int) env("RWBENCH_WARMUP", STANDARD.warmup),
                    (long) (env("RWBENCH_SECONDS", STANDARD.durationNs / 1e9) * 1e9),
                    (int) env("RWBENCH_WAITERS", STANDARD.waiters),
                    (int) env("RWBENCH_BURSTS", STANDARD.bursts),
                    Integer.parseInt(cl[0].trim()), Integer.parseInt(cl[1].trim()));
        }

        static double env(String name, double dflt) {
            String v = System.getenv(name);
            return v == null || v.isEmpty() ? dflt : Double.parseDouble(v);
        }

        /** The workload's name in the output, suffixed when the run is not the standard one. */
        String name(String w) {
            switch (w) {
                case "W1": case "W2":
                    return ops != STANDARD.ops || warmup != STANDARD.warmup ? w + "-smoke" : w;
                case "W3": case "W4": case "W5": case "W11":
                    return durationNs != STANDARD.durationNs ? w + "-smoke" : w;
                case "W6": case "W6r":
                    return waiters != STANDARD.waiters ? w + "-" + waiters : w;
                case "W7":
                    return bursts != STANDARD.bursts ? w + "-smoke" : w;
                case "W8":
                    return ops != STANDARD.ops || warmup != STANDARD.warmup || durationNs != STANDARD.durationNs ? w + "-smoke" : w;
                case "W9":
                    return durationNs != STANDARD.durationNs || w9Clients != STANDARD.w9Clients
                            || w9Locks != STANDARD.w9Locks ? w + "-smoke" : w;
                default:
                    return w;
            }
        }
    }

    final String connectString;
    final String[] servers;
    final Sizes sizes;
    final List<CuratorFramework> clients = Collections.synchronizedList(new ArrayList<>());
    final Holders holders = new Holders();

    CuratorBench(String connectString, Sizes sizes) {
        this.connectString = connectString;
        this.servers = connectString.split(",");
        this.sizes = sizes;
    }

    Record run(String workload) {
        Record r = new Record(sizes.name(workload));
        long limit = workload.equals("W9") ? W9_WATCHDOG_MS : WATCHDOG_MS;
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(limit);
            } catch (InterruptedException e) {
                return;
            }
            r.put("error", "watchdog: the run took over " + limit / 1000 + " s");
            System.out.println(r.json());
            System.out.flush();
            Runtime.getRuntime().halt(3);
        });
        watchdog.setDaemon(true);
        watchdog.start();
        try {
            switch (workload) {
                case "W1": uncontended(r, true); break;
                case "W2": uncontended(r, false); break;
                case "W3": contended(r, Mix.WRITES); break;
                case "W4": contended(r, Mix.READS); break;
                case "W5": contended(r, Mix.MIXED); break;
                case "W6": drain(r, false); break;
                case "W6r": drain(r, true); break;
                case "W7": burst(r); break;
                case "W8": multi(r); break;
                case "W9": manyLocks(r); break;
                case "W11": semaphore(r); break;
                case "splitmix64": splitmix(r); break;
                default: throw new IllegalArgumentException("unknown workload " + workload);
            }
        } catch (Exception e) {
            r.put("error", e.toString());
        } finally {
            watchdog.interrupt();
        }
        return r;
    }

    // ---------- W1, W2 ----------

    void uncontended(Record r, boolean write) throws Exception {
        CuratorFramework c = open(1).get(0);
        InterProcessReadWriteLock rw = new InterProcessReadWriteLock(c, lockPath(write ? "W1" : "W2"));
        InterProcessMutex m = write ? rw.writeLock() : rw.readLock();
        for (int i = 0; i < sizes.warmup; i++) {
            m.acquire();
            m.release();
        }
        int ops = sizes.ops;
        long[] acq = new long[ops], rel = new long[ops];
        long p0 = mntr("zk_packets_received");
        long start = System.nanoTime();
        for (int i = 0; i < ops; i++) {
            long t0 = System.nanoTime();
            m.acquire();
            long t1 = System.nanoTime();
            m.release();
            acq[i] = t1 - t0;
            rel[i] = System.nanoTime() - t1;
        }
        double elapsed = (System.nanoTime() - start) / 1e9;
        long p1 = mntr("zk_packets_received");
        r.put("clients", 1);
        r.put("warmup_cycles", sizes.warmup);
        r.put("ops", ops);
        r.put("elapsed_s", elapsed);
        r.put("ops_per_s", ops / elapsed);
        r.put("acq_p50_us", percentileUs(acq, 50));
        r.put("acq_p99_us", percentileUs(acq, 99));
        r.put("rel_p50_us", percentileUs(rel, 50));
        r.put("rel_p99_us", percentileUs(rel, 99));
        requests(r, p0, p1, 0, ops);
    }

    // ---------- W3, W4, W5 ----------

    enum Mix { WRITES, READS, MIXED }

    void contended(Record r, Mix mix) throws Exception {
        String path = lockPath(mix == Mix.WRITES ? "W3" : mix == Mix.READS ? "W4" : "W5");
        List<CuratorFramework> cs = open(CONTENDERS);
        InterProcessReadWriteLock[] locks = new InterProcessReadWriteLock[cs.size()];
        for (int i = 0; i < locks.length; i++) {
            locks[i] = new InterProcessReadWriteLock(cs.get(i), path);
            InterProcessMutex m = mix == Mix.READS ? locks[i].readLock() : locks[i].writeLock();
            m.acquire(); // unmeasured; creates the lock's parents
            m.release();
        }
        int n = locks.length;
        long[] counts = new long[n], writes = new long[n], timeouts = new long[n], held = new long[n];
        AtomicReference<Throwable> failure = new AtomicReference<>();
        CountDownLatch start = new CountDownLatch(1);
        long[] deadline = new long[1]; // written before start opens
        Thread[] threads = new Thread[n];
        for (int i = 0; i < n; i++) {
            final int id = i;
            threads[i] = new Thread(() -> {
                SplitMix64 rnd = new SplitMix64(id + 1);
                try {
                    start.await();
                    while (System.nanoTime() < deadline[0]) {
                        boolean write = mix == Mix.WRITES || (mix == Mix.MIXED && rnd.next() >= READ_SHARE);
                        InterProcessMutex m = write ? locks[id].writeLock() : locks[id].readLock();
                        if (!m.acquire(ACQUIRE_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
                            timeouts[id]++;
                            continue;
                        }
                        holders.enter(write);
                        if (mix == Mix.MIXED) {
                            long h0 = System.nanoTime();
                            Thread.sleep(HOLD_MS);
                            held[id] += System.nanoTime() - h0;
                        }
                        holders.leave(write);
                        m.release();
                        counts[id]++;
                        if (write) writes[id]++;
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            });
            threads[i].start();
        }
        long p0 = mntr("zk_packets_received");
        long t0 = System.nanoTime();
        deadline[0] = t0 + sizes.durationNs;
        start.countDown();
        for (Thread t : threads) t.join();
        double elapsed = (System.nanoTime() - t0) / 1e9;
        long p1 = mntr("zk_packets_received");

        long total = Arrays.stream(counts).sum();
        r.put("clients", n);
        r.put("hold_ms", mix == Mix.MIXED ? HOLD_MS : 0);
        r.put("elapsed_s", elapsed);
        r.put("acquisitions", total);
        r.put("acq_per_s", total / elapsed);
        r.put("per_client_min", Arrays.stream(counts).min().getAsLong());
        r.put("per_client_max", Arrays.stream(counts).max().getAsLong());
        if (mix == Mix.MIXED) {
            r.put("writes", Arrays.stream(writes).sum());
            r.put("hold_mean_us", total == 0 ? 0.0 : Arrays.stream(held).sum() / 1e3 / total);
        }
        r.put("timeouts", Arrays.stream(timeouts).sum());
        r.put("violations", holders.violations.get());
        requests(r, p0, p1, 0, total);
        if (failure.get() != null) r.put("error", failure.get().toString());
    }

    // ---------- W11 ----------

    static final int W11_CAPACITY = 4, W11_CONTENDERS = 32;

    /**
     * W11: 32 clients loop acquire, hold 1 ms, release of one lease of an
     * InterProcessSemaphoreV2 of 4 leases, each client with a semaphore
     * object of its own, reused, for the contention duration. Acquires give
     * up after 2 s, as in W3-W5. More than 4 leases held at once in the
     * process is a violation.
     */
    void semaphore(Record r) throws Exception {
        String path = lockPath(sizes.name("W11"));
        List<CuratorFramework> cs = open(W11_CONTENDERS);
        InterProcessSemaphoreV2[] sems = new InterProcessSemaphoreV2[cs.size()];
        for (int i = 0; i < sems.length; i++) {
            sems[i] = new InterProcessSemaphoreV2(cs.get(i), path, W11_CAPACITY);
            sems[i].returnLease(sems[i].acquire()); // unmeasured; creates the semaphore's parents
        }
        int n = sems.length;
        long[] counts = new long[n], timeouts = new long[n], held = new long[n];
        AtomicInteger inUse = new AtomicInteger();
        AtomicLong violations = new AtomicLong();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        CountDownLatch start = new CountDownLatch(1);
        long[] deadline = new long[1]; // written before start opens
        Thread[] threads = new Thread[n];
        for (int i = 0; i < n; i++) {
            final int id = i;
            threads[i] = new Thread(() -> {
                try {
                    start.await();
                    while (System.nanoTime() < deadline[0]) {
                        Lease lease = sems[id].acquire(ACQUIRE_TIMEOUT_MS, TimeUnit.MILLISECONDS);
                        if (lease == null) {
                            timeouts[id]++;
                            continue;
                        }
                        if (inUse.incrementAndGet() > W11_CAPACITY) violations.incrementAndGet();
                        long h0 = System.nanoTime();
                        Thread.sleep(HOLD_MS);
                        held[id] += System.nanoTime() - h0;
                        inUse.decrementAndGet();
                        sems[id].returnLease(lease);
                        counts[id]++;
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            });
            threads[i].start();
        }
        long p0 = mntr("zk_packets_received");
        long t0 = System.nanoTime();
        deadline[0] = t0 + sizes.durationNs;
        start.countDown();
        for (Thread t : threads) t.join();
        double elapsed = (System.nanoTime() - t0) / 1e9;
        long p1 = mntr("zk_packets_received");

        long total = Arrays.stream(counts).sum();
        double ceiling = W11_CAPACITY * 1000.0 / HOLD_MS;
        r.put("clients", n);
        r.put("capacity", W11_CAPACITY);
        r.put("hold_ms", HOLD_MS);
        r.put("elapsed_s", elapsed);
        r.put("acquisitions", total);
        r.put("acq_per_s", total / elapsed);
        r.put("of_ceiling", total / elapsed / ceiling);
        r.put("per_client_min", Arrays.stream(counts).min().getAsLong());
        r.put("per_client_max", Arrays.stream(counts).max().getAsLong());
        r.put("hold_mean_us", total == 0 ? 0.0 : Arrays.stream(held).sum() / 1e3 / total);
        r.put("timeouts", Arrays.stream(timeouts).sum());
        r.put("violations", violations.get());
        requests(r, p0, p1, 0, total);
        if (failure.get() != null) r.put("error", failure.get().toString());
    }

    // ---------- W7 ----------

    static final int BURST_THREADS = 64;

    /**
     * W7: 64 threads of one client, each with a lock object of its own on
     * one path (Curator's one lock per thread), acquire the read lock at once
     * and release it; a tenth as many unmeasured bursts, then the measured
     * ones, as zkrwlock's W7. The threads live for the whole run and meet at
     * barriers, so that no burst pays for starting them.
     */
    void burst(Record r) throws Exception {
        CuratorFramework c = open(1).get(0);
        String path = lockPath(sizes.name("W7"));
        int warmup = Math.max(sizes.bursts / 10, 1), bursts = sizes.bursts;
        // Each burst opens at start and ends at done; main is the extra party.
        CyclicBarrier start = new CyclicBarrier(BURST_THREADS + 1), done = new CyclicBarrier(BURST_THREADS + 1);
        AtomicLong timeouts = new AtomicLong();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        Thread[] threads = new Thread[BURST_THREADS];
        for (int i = 0; i < BURST_THREADS; i++) {
            InterProcessMutex m = new InterProcessReadWriteLock(c, path).readLock();
            threads[i] = new Thread(() -> {
                for (int k = 0; k < warmup + bursts; k++) {
                    try {
                        start.await();
                    } catch (Exception e) {
                        failure.compareAndSet(null, e);
                        return;
                    }
                    try {
                        if (m.acquire(ACQUIRE_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
                            m.release();
                        } else {
                            timeouts.incrementAndGet();
                        }
                    } catch (Throwable e) {
                        // Still meet the others at done: a broken barrier would hang them.
                        failure.compareAndSet(null, e);
                    }
                    try {
                        done.await();
                    } catch (Exception e) {
                        failure.compareAndSet(null, e);
                        return;
                    }
                }
            });
            threads[i].setDaemon(true);
            threads[i].start();
        }
        for (int k = 0; k < warmup; k++) {
            start.await();
            done.await();
        }
        long[] lat = new long[bursts];
        long p0 = mntr("zk_packets_received");
        long t0 = System.nanoTime();
        for (int k = 0; k < bursts; k++) {
            long b0 = System.nanoTime();
            start.await();
            done.await();
            lat[k] = System.nanoTime() - b0;
        }
        double elapsed = (System.nanoTime() - t0) / 1e9;
        long p1 = mntr("zk_packets_received");
        for (Thread t : threads) t.join();
        r.put("clients", 1);
        r.put("threads", BURST_THREADS);
        r.put("warmup_bursts", warmup);
        r.put("bursts", bursts);
        r.put("elapsed_s", elapsed);
        r.put("bursts_per_s", bursts / elapsed);
        r.put("burst_p50_us", percentileUs(lat, 50));
        r.put("burst_p99_us", percentileUs(lat, 99));
        r.put("timeouts", timeouts.get());
        requests(r, p0, p1, 0, (long) bursts * BURST_THREADS);
        r.put("zk_req_per_burst", (double) (p1 - p0 - servers.length) / bursts);
        if (failure.get() != null) r.put("error", failure.get().toString());
    }

    // ---------- W8 ----------

    static final int MULTI_LOCKS = 4, MULTI_CLIENTS = 4;

    /** The 4 locks of one client, in the order of perm: 0 and 1 written, 2 and 3 read. */
    static InterProcessMultiLock multiLock(InterProcessReadWriteLock[] rws, List<Integer> perm) {
        List<InterProcessLock> ls = new ArrayList<>();
        for (int i : perm) ls.add(i < 2 ? rws[i].writeLock() : rws[i].readLock());
        return new InterProcessMultiLock(ls);
    }

    /**
     * W8: one client takes the 4 locks with InterProcessMultiLock (which takes
     * them one after another) and releases them, warmup then ops cycles
     * (W8-1, in the record's own keys); then 4 clients take the same 4 locks
     * in orders of their own for the contention duration (W8-4): an
     * acquisition not done within ACQUIRE_TIMEOUT_MS counts as a deadlock
     * broken by the timeout.
     */
    void multi(Record r) throws Exception {
        String path = lockPath(sizes.name("W8"));
        List<CuratorFramework> cs = open(MULTI_CLIENTS);
        InterProcessReadWriteLock[][] rws = new InterProcessReadWriteLock[MULTI_CLIENTS][MULTI_LOCKS];
        for (int c = 0; c < MULTI_CLIENTS; c++) {
            for (int i = 0; i < MULTI_LOCKS; i++) rws[c][i] = new InterProcessReadWriteLock(cs.get(c), path + "/" + i);
        }
        List<Integer> order = List.of(0, 1, 2, 3);
        InterProcessMultiLock one = multiLock(rws[0], order);
        for (int i = 0; i < sizes.warmup; i++) {
            one.acquire();
            one.release();
        }
        int ops = sizes.ops;
        long[] acq = new long[ops], rel = new long[ops];
        long p0 = mntr("zk_packets_received");
        long start = System.nanoTime();
        for (int i = 0; i < ops; i++) {
            long t0 = System.nanoTime();
            one.acquire();
            long t1 = System.nanoTime();
            acq[i] = t1 - t0;
            one.release();
            rel[i] = System.nanoTime() - t1;
        }
        double elapsed = (System.nanoTime() - start) / 1e9;
        long p1 = mntr("zk_packets_received");
        r.put("locks", MULTI_LOCKS);
        r.put("ops", ops);
        r.put("ops_per_s", ops / elapsed);
        r.put("acq_p50_us", percentileUs(acq, 50));
        r.put("acq_p99_us", percentileUs(acq, 99));
        r.put("rel_p50_us", percentileUs(rel, 50));
        r.put("rel_p99_us", percentileUs(rel, 99));
        requests(r, p0, p1, 0, ops);

        long[] sets = new long[MULTI_CLIENTS], deadlocks = new long[MULTI_CLIENTS];
        Holders[] xs = new Holders[MULTI_LOCKS];
        for (int i = 0; i < MULTI_LOCKS; i++) xs[i] = new Holders();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        long deadline = System.nanoTime() + sizes.durationNs;
        long t0 = System.nanoTime();
        Thread[] threads = new Thread[MULTI_CLIENTS];
        for (int c = 0; c < MULTI_CLIENTS; c++) {
            final int id = c;
            threads[c] = new Thread(() -> {
                Random rnd = new Random(id + 1);
                try {
                    while (System.nanoTime() < deadline) {
                        List<Integer> perm = new ArrayList<>(order);
                        Collections.shuffle(perm, rnd);
                        InterProcessMultiLock m = multiLock(rws[id], perm);
                        if (!m.acquire(ACQUIRE_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
                            deadlocks[id]++;
                            continue;
                        }
                        for (int i : perm) xs[i].enter(i < 2);
                        for (int i : perm) xs[i].leave(i < 2);
                        m.release();
                        sets[id]++;
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            });
            threads[c].start();
        }
        for (Thread t : threads) t.join();
        double contended = (System.nanoTime() - t0) / 1e9;
        long total = Arrays.stream(sets).sum();
        long violations = 0;
        for (Holders x : xs) violations += x.violations.get();
        r.put("contended_clients", MULTI_CLIENTS);
        r.put("contended_sets", total);
        r.put("contended_sets_per_s", total / contended);
        r.put("deadlocks", Arrays.stream(deadlocks).sum());
        r.put("violations", violations);
        if (failure.get() != null) r.put("error", failure.get().toString());
    }

    // ---------- W6, W6r ----------

    void drain(Record r, boolean readers) throws Exception {
        List<CuratorFramework> cs = open(sizes.waiters + 1);
        String path = lockPath(sizes.name(readers ? "W6r" : "W6"));
        drainRound(new Record("warm-up"), cs, path + "-warmup", readers); // unmeasured
        drainRound(r, cs, path, readers);
    }

    void drainRound(Record r, List<CuratorFramework> cs, String path, boolean readers) throws Exception {
        int n = cs.size() - 1;
        CuratorFramework holderClient = cs.get(0);
        InterProcessMutex holder = new InterProcessReadWriteLock(holderClient, path).writeLock();
        holder.acquire();
        holders.enter(true);
        long[] acqT = new long[n], relT = new long[n];
        AtomicInteger failed = new AtomicInteger();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        CountDownLatch allHeld = new CountDownLatch(n);
        long watch0 = mntr("zk_watch_count");
        long p0 = mntr("zk_packets_received");
        long tq = System.nanoTime();
        Thread[] threads = new Thread[n];
        for (int i = 0; i < n; i++) {
            final int id = i;
            InterProcessReadWriteLock rw = new InterProcessReadWriteLock(cs.get(i + 1), path);
            InterProcessMutex m = readers ? rw.readLock() : rw.writeLock();
            threads[i] = new Thread(() -> {
                try {
                    if (!m.acquire(WAITER_TIMEOUT_S, TimeUnit.SECONDS)) {
                        failed.incrementAndGet();
                        allHeld.countDown();
                        return;
                    }
                    acqT[id] = System.nanoTime();
                    holders.enter(!readers);
                    if (readers) {
                        allHeld.countDown();
                        if (!allHeld.await(WAITER_TIMEOUT_S, TimeUnit.SECONDS)) {
                            failure.compareAndSet(null, new IllegalStateException("not every reader held the lock"));
                        }
                    }
                    holders.leave(!readers);
                    relT[id] = System.nanoTime();
                    m.release();
                } catch (Throwable e) {
                    failed.incrementAndGet();
                    failure.compareAndSet(null, e);
                }
            });
            threads[i].start();
        }

        // The holder's listings and the mntr polls are not the workload's
        // requests: count them, to subtract them.
        long polls = 0, mntrPolls = 0;
        while (true) {
            polls++;
            if (holderClient.getChildren().forPath(path).size() >= n + 1) break;
            Thread.sleep(POLL_MS);
        }
        for (long until = System.nanoTime() + WATCH_TIMEOUT_NS; ; ) {
            mntrPolls++;
            if (mntr("zk_watch_count") - watch0 >= n || System.nanoTime() >= until) break;
            Thread.sleep(POLL_MS);
        }
        holders.leave(true);
        long tRel = System.nanoTime();
        holder.release();
        for (Thread t : threads) t.join();
        long p1 = mntr("zk_packets_received");

        List<Integer> order = new ArrayList<>(); // the waiters that held, in the order they did
        long last = tRel;
        for (int i = 0; i < n; i++) {
            if (acqT[i] == 0) continue;
            order.add(i);
            last = Math.max(last, readers ? acqT[i] : relT[i]);
        }
        order.sort((a, b) -> Long.compare(acqT[a], acqT[b]));
        r.put("waiters", n);
        r.put("enqueue_s", (tRel - tq) / 1e9);
        r.put("failed", failed.get());
        r.put("drain_s", (last - tRel) / 1e9);
        if (readers) {
            long[] wake = order.stream().mapToLong(i -> acqT[i] - tRel).toArray();
            r.put("wake_mean_us", meanUs(wake));
            r.put("wake_p50_us", percentileUs(wake, 50));
            r.put("wake_max_us", percentileUs(wake, 100));
        } else {
            long[] handoff = new long[order.size()];
            long prev = tRel;
            for (int k = 0; k < handoff.length; k++) {
                handoff[k] = acqT[order.get(k)] - prev;
                prev = relT[order.get(k)];
            }
            r.put("handoff_mean_us", meanUs(handoff));
            r.put("handoff_p50_us", percentileUs(handoff, 50));
            r.put("handoff_p99_us", percentileUs(handoff, 99));
        }
        r.put("violations", holders.violations.get());
        requests(r, p0, p1, polls + mntrPolls * servers.length, n);
        if (failure.get() != null) r.put("error", failure.get().toString());
    }

    // ---------- W9 ----------

    /** W9's measured phases in order: true for a lock phase, as bench/manylocks_test.go. */
    static final boolean[] W9_PHASES = {false, true, true, false};

    /**
     * W9: many locks on an ensemble. Each client's session loops over locks
     * drawn at random (splitmix64, seeded with its index plus one): in a lock
     * phase InterProcessMutex acquire and release, in a raw phase a create
     * and a delete of the mutex's kind of node (protected, ephemeral
     * sequential, "lock-") in the lock's directory. The directories are made
     * first; then every client takes every lock once, unmeasured (the JIT,
     * and every lock object made); then the phases raw, lock, lock, raw.
     */
    void manyLocks(Record r) throws Exception {
        int n = sizes.w9Clients, nLocks = sizes.w9Locks;
        List<CuratorFramework> cs = open(n);
        String root = lockPath("W9");
        String[] dirs = new String[nLocks];
        for (int i = 0; i < nLocks; i++) {
            dirs[i] = root + "/" + i;
            cs.get(i % n).create().creatingParentsIfNeeded().forPath(dirs[i]);
        }
        InterProcessMutex[][] mutexes = new InterProcessMutex[n][nLocks];
        for (int c = 0; c < n; c++) {
            for (int i = 0; i < nLocks; i++) mutexes[c][i] = new InterProcessMutex(cs.get(c), dirs[i]);
        }
        Holders[] perLock = new Holders[nLocks]; // the check, lock by lock
        for (int i = 0; i < nLocks; i++) perLock[i] = new Holders();

        // The warm-up: client c takes every lock once, from lock c*locks/clients on.
        AtomicReference<Throwable> failure = new AtomicReference<>();
        Thread[] threads = new Thread[n];
        long tw = System.nanoTime();
        for (int c = 0; c < n; c++) {
            final int id = c;
            threads[c] = new Thread(() -> {
                try {
                    for (int k = 0; k < nLocks; k++) {
                        int i = (int) (((long) id * nLocks / n + k) % nLocks);
                        mutexes[id][i].acquire();
                        perLock[i].enter(true);
                        perLock[i].leave(true);
                        mutexes[id][i].release();
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            });
            threads[c].start();
        }
        for (Thread t : threads) t.join();
        double warm = (System.nanoTime() - tw) / 1e9;
        if (failure.get() != null) throw new IllegalStateException("warm-up: " + failure.get(), failure.get());

        SplitMix64[] rnd = new SplitMix64[n];
        for (int c = 0; c < n; c++) rnd[c] = new SplitMix64(c + 1);
        List<Object> rates = new ArrayList<>();
        long[] count = new long[2], timeouts = new long[2], packets = new long[2], elapsed = new long[2];
        long[] lo = {Long.MAX_VALUE, Long.MAX_VALUE}, hi = new long[2];
        long[] busy = new long[2], all = new long[2];
        List<long[]> first0 = new ArrayList<>(), second0 = new ArrayList<>(), first1 = new ArrayList<>(), second1 = new ArrayList<>();
        for (boolean lock : W9_PHASES) {
            int k = lock ? 1 : 0;
            long[] counts = new long[n], touts = new long[n];
            long[][] first = new long[n][], second = new long[n][];
            CountDownLatch start = new CountDownLatch(1);
            long[] deadline = new long[1]; // written before start opens
            for (int c = 0; c < n; c++) {
                final int id = c;
                threads[c] = new Thread(() -> {
                    long[] a = new long[1 << 10], b = new long[1 << 10];
                    CuratorFramework cf = cs.get(id);
                    try {
                        start.await();
                        while (System.nanoTime() < deadline[0]) {
                            int i = (int) (rnd[id].next() * nLocks);
                            long t0 = System.nanoTime(), t1;
                            if (lock) {
                                InterProcessMutex m = mutexes[id][i];
                                if (!m.acquire(ACQUIRE_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
                                    touts[id]++;
                                    continue;
                                }
                                t1 = System.nanoTime();
                                perLock[i].enter(true);
                                perLock[i].leave(true);
                                m.release();
                            } else {
                                String path = cf.create().withProtection().withMode(CreateMode.EPHEMERAL_SEQUENTIAL)
                                        .forPath(dirs[i] + "/lock-");
                                t1 = System.nanoTime();
                                cf.delete().forPath(path);
                            }
                            int j = (int) counts[id]++;
                            if (j == a.length) {
                                a = Arrays.copyOf(a, 2 * j);
                                b = Arrays.copyOf(b, 2 * j);
                            }
                            a[j] = t1 - t0;
                            b[j] = System.nanoTime() - t1;
                        }
                    } catch (Throwable e) {
                        failure.compareAndSet(null, e);
                    }
                    first[id] = Arrays.copyOf(a, (int) counts[id]);
                    second[id] = Arrays.copyOf(b, (int) counts[id]);
                });
                threads[c].start();
            }
            long[] ticks0 = machineTicks();
            long p0 = mntr("zk_packets_received");
            long t0 = System.nanoTime();
            deadline[0] = t0 + sizes.durationNs;
            start.countDown();
            for (Thread t : threads) t.join();
            long el = System.nanoTime() - t0;
            long p1 = mntr("zk_packets_received");
            long[] ticks1 = machineTicks();
            long total = Arrays.stream(counts).sum();
            rates.add((double) Math.round(total / (el / 1e9)));
            count[k] += total;
            timeouts[k] += Arrays.stream(touts).sum();
            packets[k] += p1 - p0 - servers.length;
            elapsed[k] += el;
            lo[k] = Math.min(lo[k], Arrays.stream(counts).min().getAsLong());
            hi[k] = Math.max(hi[k], Arrays.stream(counts).max().getAsLong());
            busy[k] += ticks1[0] - ticks0[0];
            all[k] += ticks1[1] - ticks0[1];
            (lock ? first1 : first0).addAll(Arrays.asList(first));
            (lock ? second1 : second0).addAll(Arrays.asList(second));
            if (failure.get() != null) break;
        }
        for (String dir : dirs) cs.get(0).delete().quietly().forPath(dir); // the tree does not grow from run to run

        long violations = 0;
        for (Holders h : perLock) violations += h.violations.get();
        double lockRate = elapsed[1] == 0 ? 0 : count[1] / (elapsed[1] / 1e9);
        double rawRate = elapsed[0] == 0 ? 0 : count[0] / (elapsed[0] / 1e9);
        r.put("clients", n);
        r.put("locks", nLocks);
        r.put("servers", servers.length);
        r.put("phase_s", sizes.durationNs / 1e9);
        r.put("phases", List.of("raw", "lock", "lock", "raw"));
        r.put("phase_rates", rates);
        r.put("warmup_s", warm);
        r.put("warmup_cycles_per_s", (double) n * nLocks / warm);
        r.put("elapsed_s", elapsed[1] / 1e9);
        r.put("acquisitions", count[1]);
        r.put("cycles_per_s", lockRate);
        r.put("raw_pairs", count[0]);
        r.put("raw_pairs_per_s", rawRate);
        r.put("lock_over_raw", rawRate > 0 ? (Object) (lockRate / rawRate) : null);
        r.put("per_client_min", lo[1] == Long.MAX_VALUE ? 0 : lo[1]);
        r.put("per_client_max", hi[1]);
        r.put("timeouts", timeouts[1]);
        r.put("violations", violations);
        r.put("acq_p50_us", percentileUs(concat(first1), 50));
        r.put("acq_p99_us", percentileUs(concat(first1), 99));
        r.put("rel_p50_us", percentileUs(concat(second1), 50));
        r.put("rel_p99_us", percentileUs(concat(second1), 99));
        r.put("create_p50_us", percentileUs(concat(first0), 50));
        r.put("create_p99_us", percentileUs(concat(first0), 99));
        r.put("delete_p50_us", percentileUs(concat(second0), 50));
        r.put("delete_p99_us", percentileUs(concat(second0), 99));
        r.put("zk_packets", packets[1]);
        r.put("zk_req_per_acq", count[1] > 0 ? (Object) ((double) packets[1] / count[1]) : null);
        r.put("zk_req_per_pair", count[0] > 0 ? (Object) ((double) packets[0] / count[0]) : null);
        r.put("machine_busy", all[1] > 0 ? (Object) ((double) busy[1] / all[1]) : -1.0);
        r.put("raw_machine_busy", all[0] > 0 ? (Object) ((double) busy[0] / all[0]) : -1.0);
        if (failure.get() != null) r.put("error", failure.get().toString());
        else if (violations > 0) r.put("error", violations + " mutual exclusion violations");
    }

    static long[] concat(List<long[]> parts) {
        long[] out = new long[parts.stream().mapToInt(p -> p == null ? 0 : p.length).sum()];
        int at = 0;
        for (long[] p : parts) {
            if (p == null) continue;
            System.arraycopy(p, 0, out, at, p.length);
            at += p.length;
        }
        return out;
    }

    /**
     * The clock ticks all CPUs have spent, busy (user, nice, system, as
     * scripts/compare-peers.sh counts them) and in all, from /proc/stat;
     * zeros where there is none.
     */
    static long[] machineTicks() {
        try {
            String line = Files.readAllLines(Path.of("/proc/stat")).get(0);
            String[] f = line.trim().split("\\s+");
            long busy = 0, all = 0;
            for (int i = 1; i < f.length; i++) {
                long v = Long.parseLong(f[i]);
                all += v;
                if (i <= 3) busy += v;
            }
            return new long[] {busy, all};
        } catch (IOException | RuntimeException e) {
            return new long[2];
        }
    }

    // ---------- the generator, for the test that every language draws alike ----------

    /** first: the first 5 outputs of seeds 1..8 (top 53 bits); writes: draws >= 0.9 among each seed's first 1000. */
    void splitmix(Record r) {
        List<Object> first = new ArrayList<>(), writes = new ArrayList<>();
        for (int seed = 1; seed <= CONTENDERS; seed++) {
            SplitMix64 m = new SplitMix64(seed);
            List<Object> draws = new ArrayList<>();
            for (int i = 0; i < 5; i++) draws.add(m.next53());
            first.add(draws);
            m = new SplitMix64(seed);
            long w = 0;
            for (int i = 0; i < 1000; i++) if (m.next() >= READ_SHARE) w++;
            writes.add(w);
        }
        r.put("first", first);
        r.put("writes", writes);
    }

    // ---------- sessions ----------

    /** Opens n clients at once and waits until each has its session. */
    List<CuratorFramework> open(int n) throws Exception {
        List<CuratorFramework> cs = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            CuratorFramework c = CuratorFrameworkFactory.builder()
                    .connectString(connectString)
                    .sessionTimeoutMs(SESSION_TIMEOUT_MS)
                    .connectionTimeoutMs(15_000)
                    .retryPolicy(new ExponentialBackoffRetry(100, 3))
                    // No watch on /zookeeper/config: the server's watch count
                    // is then the locks' alone (W6).
                    .ensembleTracker(false)
                    .build();
            clients.add(c);
            c.start();
            cs.add(c);
        }
        for (CuratorFramework c : cs) {
            if (!c.blockUntilConnected(CONNECT_TIMEOUT_S, TimeUnit.SECONDS)) {
                throw new IllegalStateException("no session after " + CONNECT_TIMEOUT_S + " s");
            }
        }
        return cs;
    }

    /**
     * Closes every client, so that the server deletes their nodes now and
     * not at expiry during the next run. The ZooKeeper 3.8 client closes one
     * session at a time (about 100 ms each, under a lock shared by all), so
     * W6's 201 take about 20 s, however many threads close them.
     */
    void closeClients() throws InterruptedException {
        List<Thread> closers = new ArrayList<>();
        synchronized (clients) {
            for (CuratorFramework c : clients) {
                Thread t = new Thread(c::close);
                t.setDaemon(true);
                t.start();
                closers.add(t);
            }
            clients.clear();
        }
        long until = System.currentTimeMillis() + CLOSE_TIMEOUT_MS;
        for (Thread t : closers) t.join(Math.max(1, until - System.currentTimeMillis()));
    }

    String lockPath(String workload) {
        return "/rwbench/curator/" + workload + "-" + System.currentTimeMillis() + "-" + new Random().nextInt(1 << 30);
    }

    // ---------- measurement ----------

    /** An integer mntr statistic, summed over the servers; each call costs every server one packet. */
    long mntr(String key) throws IOException {
        long sum = 0;
        for (String hostPort : servers) {
            int colon = hostPort.lastIndexOf(':');
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress(hostPort.substring(0, colon),
                        Integer.parseInt(hostPort.substring(colon + 1))), MNTR_TIMEOUT_MS);
                s.setSoTimeout(MNTR_TIMEOUT_MS);
                OutputStream out = s.getOutputStream();
                out.write("mntr".getBytes(StandardCharsets.US_ASCII));
                out.flush();
                InputStream in = s.getInputStream(); // the server closes after its reply
                ByteArrayOutputStream reply = new ByteArrayOutputStream();
                in.transferTo(reply);
                boolean found = false;
                for (String line : reply.toString(StandardCharsets.US_ASCII).split("\n")) {
                    String[] kv = line.split("\t");
                    if (kv.length == 2 && kv[0].equals(key)) {
                        sum += Long.parseLong(kv[1].trim());
                        found = true;
                    }
                }
                if (!found) throw new IOException("mntr " + hostPort + ": no " + key);
            }
        }
        return sum;
    }

    /**
     * zk_packets: what the servers received between two mntr snapshots, less
     * the second snapshot's own packets and other packets that were not the
     * workload's; zk_req_per_acq: those per acquisition.
     */
    void requests(Record r, long p0, long p1, long other, long acquisitions) {
        long packets = p1 - p0 - servers.length - other;
        r.put("zk_packets", packets);
        r.put("zk_req_per_acq", acquisitions > 0 ? (Object) ((double) packets / acquisitions) : null);
    }

    /** The nearest-rank percentile p of ns, in microseconds. */
    static double percentileUs(long[] ns, double p) {
        if (ns.length == 0) return 0;
        long[] s = ns.clone();
        Arrays.sort(s);
        int i = (int) Math.ceil(p / 100 * s.length) - 1;
        return s[Math.max(0, Math.min(i, s.length - 1))] / 1e3;
    }

    static double meanUs(long[] ns) {
        if (ns.length == 0) return 0;
        double t = 0;
        for (long v : ns) t += v;
        return t / ns.length / 1e3;
    }

    /**
     * The in-process mutual exclusion check: counts of active readers and
     * writers, updated right after an acquire and right before a release. A
     * writer that finds any other holder, or a reader that finds a writer,
     * is a violation. It counts across a workload's rounds.
     */
    static final class Holders {
        final AtomicInteger readers = new AtomicInteger(), writers = new AtomicInteger();
        final AtomicLong violations = new AtomicLong();

        void enter(boolean write) {
            if (write) {
                int w = writers.incrementAndGet();
                if (w > 1 || readers.get() > 0) violations.incrementAndGet();
            } else {
                readers.incrementAndGet();
                if (writers.get() > 0) violations.incrementAndGet();
            }
        }

        void leave(boolean write) {
            (write ? writers : readers).decrementAndGet();
        }
    }

    /**
     * splitmix64 (Steele, Lea and Flood), the generator every harness uses
     * for W5, so that client i draws the same reads and writes in every
     * language: seeded with i+1, next() is the top 53 bits of the output as
     * a double in [0, 1).
     */
    static final class SplitMix64 {
        long state;

        SplitMix64(long seed) { state = seed; }

        /** The next output's top 53 bits. */
        long next53() {
            state += 0x9E3779B97F4A7C15L;
            long z = state;
            z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
            z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
            z ^= z >>> 31;
            return z >>> 11;
        }

        double next() { return next53() * 0x1.0p-53; }
    }

    // ---------- output ----------

    /** One JSON line: keys in the order put, numbers with at most 3 decimals. */
    static final class Record {
        final Map<String, Object> fields = new LinkedHashMap<>();

        Record(String workload) {
            put("impl", "curator");
            put("workload", workload);
        }

        synchronized void put(String k, Object v) { fields.put(k, v); }

        synchronized boolean has(String k) { return fields.containsKey(k); }

        synchronized String json() {
            StringBuilder b = new StringBuilder("{");
            for (Map.Entry<String, Object> e : fields.entrySet()) {
                if (b.length() > 1) b.append(", ");
                b.append(quote(e.getKey())).append(": ").append(value(e.getValue()));
            }
            return b.append('}').toString();
        }

        static String value(Object v) {
            if (v == null) return "null";
            if (v instanceof Double || v instanceof Float) {
                double d = ((Number) v).doubleValue();
                if (!Double.isFinite(d)) return "null";
                String s = String.format(Locale.ROOT, "%.3f", d);
                s = s.replaceAll("0+$", "");
                return s.endsWith(".") ? s + "0" : s;
            }
            if (v instanceof Number || v instanceof Boolean) return v.toString();
            if (v instanceof List) {
                StringBuilder b = new StringBuilder("[");
                for (Object o : (List<?>) v) {
                    if (b.length() > 1) b.append(", ");
                    b.append(value(o));
                }
                return b.append(']').toString();
            }
            return quote(v.toString());
        }

        static String quote(String s) {
            StringBuilder b = new StringBuilder("\"");
            for (char c : s.toCharArray()) {
                if (c == '"' || c == '\\') b.append('\\').append(c);
                else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                else b.append(c);
            }
            return b.append('"').toString();
        }
    }
}
