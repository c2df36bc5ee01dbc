#!/usr/bin/python3
"""The comparison's workloads (W1-W6r, bench/peers/README.md) with kazoo's
ReadLock and WriteLock, as a kazoo user would write them: one KazooClient
per client session, one lock object per client and kind, reused.

    /usr/bin/python3 kazoo_bench.py CONNECT_STRING WORKLOAD...

Debian's python3-kazoo is installed for /usr/bin/python3 only
(scripts/install-peers.sh). For each workload it prints one JSON line on
stdout (impl "kazoo"), with an "error" key if the workload failed, and exits
1 at the end if one did. RWBENCH_OPS, RWBENCH_WARMUP, RWBENCH_SECONDS and
RWBENCH_WAITERS shrink the workloads for smoke tests; the workload names then
say so (W1-smoke, W6-5).
"""
import json
import math
import os
import random
import socket
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout

# The workload constants (bench/peers/README.md).
SESSION_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 30.0
CONTENDERS = 8
ACQUIRE_TIMEOUT_S = 2.0
WAITER_TIMEOUT_S = 90.0
WATCH_TIMEOUT_NS = 30 * 10**9
READ_SHARE = 0.9
HOLD_S = 0.001
MNTR_TIMEOUT_S = 5.0
POLL_S = 0.01
WATCHDOG_S = 300.0  # one workload, through a slow proxy included

STANDARD = {"ops": 2000, "warmup": 100, "seconds": 5.0, "waiters": 200}

clock = time.perf_counter_ns  # monotonic


def sizes_from_env():
    s = dict(STANDARD)
    for key in s:
        v = os.environ.get("RWBENCH_" + key.upper())
        if v:
            s[key] = float(v) if key == "seconds" else int(float(v))
    return s


def workload_name(w, s):
    """The workload's name in the output, suffixed when the run is not the standard one."""
    if w in ("W1", "W2") and (s["ops"] != STANDARD["ops"] or s["warmup"] != STANDARD["warmup"]):
        return w + "-smoke"
    if w in ("W3", "W4", "W5") and s["seconds"] != STANDARD["seconds"]:
        return w + "-smoke"
    if w in ("W6", "W6r") and s["waiters"] != STANDARD["waiters"]:
        return "%s-%d" % (w, s["waiters"])
    return w


class SplitMix64:
    """splitmix64 (Steele, Lea and Flood), the generator every harness uses for
    W5, so that client i draws the same reads and writes in every language:
    seeded with i+1, next() is the top 53 bits of the output as a float in
    [0, 1)."""

    MASK = (1 << 64) - 1

    def __init__(self, seed):
        self.state = seed

    def next53(self):
        """The next output's top 53 bits."""
        self.state = (self.state + 0x9E3779B97F4A7C15) & self.MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self.MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self.MASK
        z ^= z >> 31
        return z >> 11

    def next(self):
        return self.next53() / float(1 << 53)


class Holders:
    """The in-process mutual exclusion check: counts of active readers and
    writers, updated right after an acquire and right before a release. A
    writer that finds any other holder, or a reader that finds a writer, is a
    violation. It counts across a workload's rounds."""

    def __init__(self):
        self.mu = threading.Lock()
        self.readers = self.writers = self.violations = 0

    def enter(self, write):
        with self.mu:
            if write:
                self.writers += 1
                if self.writers > 1 or self.readers > 0:
                    self.violations += 1
            else:
                self.readers += 1
                if self.writers > 0:
                    self.violations += 1

    def leave(self, write):
        with self.mu:
            if write:
                self.writers -= 1
            else:
                self.readers -= 1


def percentile_us(ns, p):
    """The nearest-rank percentile p of ns, in microseconds."""
    if not ns:
        return 0.0
    s = sorted(ns)
    i = math.ceil(p / 100.0 * len(s)) - 1
    return s[max(0, min(i, len(s) - 1))] / 1e3


def mean_us(ns):
    return sum(ns) / len(ns) / 1e3 if ns else 0.0


class Bench:
    def __init__(self, connect_string, sizes):
        self.connect_string = connect_string
        self.servers = connect_string.split(",")
        self.sizes = sizes
        self.clients = []
        self.holders = Holders()

    # ---------- sessions ----------

    def open(self, n):
        """Starts n clients at once and waits until each has its session."""
        cs = [KazooClient(hosts=self.connect_string, timeout=SESSION_TIMEOUT_S) for _ in range(n)]
        self.clients.extend(cs)
        started = [c.start_async() for c in cs]
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        for ev in started:
            ev.wait(max(0.0, deadline - time.monotonic()))
        if not all(c.connected for c in cs):
            raise RuntimeError("no session after %.0f s" % CONNECT_TIMEOUT_S)
        return cs

    def close_clients(self):
        """Closes every client, so that the server deletes their nodes now and
        not at expiry during the next run."""
        def close(c):
            try:
                c.stop()
                c.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        threads = [threading.Thread(target=close, args=(c,), daemon=True) for c in self.clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
        self.clients = []

    def lock_path(self, workload):
        return "/rwbench/kazoo/%s-%d-%d" % (workload, int(time.time() * 1000), random.getrandbits(30))

    # ---------- measurement ----------

    def mntr(self, key):
        """An integer mntr statistic, summed over the servers; each call costs
        every server one packet."""
        total = 0
        for hp in self.servers:
            host, port = hp.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=MNTR_TIMEOUT_S) as s:
                s.sendall(b"mntr")
                chunks = []
                while True:  # the server closes after its reply
                    b = s.recv(65536)
                    if not b:
                        break
                    chunks.append(b)
            for line in b"".join(chunks).decode().splitlines():
                kv = line.split("\t")
                if len(kv) == 2 and kv[0] == key:
                    total += int(kv[1])
                    break
            else:
                raise RuntimeError("mntr %s: no %s" % (hp, key))
        return total

    def requests(self, r, p0, p1, other, acquisitions):
        """zk_packets: what the servers received between two mntr snapshots,
        less the second snapshot's own packets and other packets that were not
        the workload's; zk_req_per_acq: those per acquisition."""
        packets = p1 - p0 - len(self.servers) - other
        r["zk_packets"] = packets
        r["zk_req_per_acq"] = packets / acquisitions if acquisitions else None

    # ---------- W1, W2 ----------

    def uncontended(self, r, write):
        c = self.open(1)[0]
        path = self.lock_path("W1" if write else "W2")
        m = c.WriteLock(path) if write else c.ReadLock(path)
        for _ in range(self.sizes["warmup"]):
            m.acquire()
            m.release()
        ops = self.sizes["ops"]
        acq, rel = [0] * ops, [0] * ops
        p0 = self.mntr("zk_packets_received")
        start = clock()
        for i in range(ops):
            t0 = clock()
            m.acquire()
            t1 = clock()
            m.release()
            acq[i], rel[i] = t1 - t0, clock() - t1
        elapsed = (clock() - start) / 1e9
        p1 = self.mntr("zk_packets_received")
        r.update(clients=1, warmup_cycles=self.sizes["warmup"], ops=ops, elapsed_s=elapsed,
                 ops_per_s=ops / elapsed,
                 acq_p50_us=percentile_us(acq, 50), acq_p99_us=percentile_us(acq, 99),
                 rel_p50_us=percentile_us(rel, 50), rel_p99_us=percentile_us(rel, 99))
        self.requests(r, p0, p1, 0, ops)

    # ---------- W3, W4, W5 ----------

    def contended(self, r, mix):
        path = self.lock_path({"writes": "W3", "reads": "W4", "mixed": "W5"}[mix])
        cs = self.open(CONTENDERS)
        locks = [(c.ReadLock(path), c.WriteLock(path)) for c in cs]
        for read, write in locks:  # unmeasured; creates the lock's parents
            m = read if mix == "reads" else write
            m.acquire()
            m.release()
        n = len(locks)
        counts, writes, timeouts, held = [0] * n, [0] * n, [0] * n, [0] * n
        failures = []
        start = threading.Event()
        deadline = [0]  # set before start

        def client(i):
            rnd = SplitMix64(i + 1)
            start.wait()
            try:
                while clock() < deadline[0]:
                    write = mix == "writes" or (mix == "mixed" and rnd.next() >= READ_SHARE)
                    m = locks[i][1] if write else locks[i][0]
                    try:
                        got = m.acquire(timeout=ACQUIRE_TIMEOUT_S)
                    except LockTimeout:
                        got = False
                    if not got:
                        timeouts[i] += 1
                        continue
                    self.holders.enter(write)
                    if mix == "mixed":
                        h0 = clock()
                        time.sleep(HOLD_S)
                        held[i] += clock() - h0
                    self.holders.leave(write)
                    m.release()
                    counts[i] += 1
                    writes[i] += write
            except Exception as e:  # noqa: BLE001 - report, don't hang
                failures.append(e)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        p0 = self.mntr("zk_packets_received")
        t0 = clock()
        deadline[0] = t0 + int(self.sizes["seconds"] * 1e9)
        start.set()
        for t in threads:
            t.join()
        elapsed = (clock() - t0) / 1e9
        p1 = self.mntr("zk_packets_received")

        total = sum(counts)
        r.update(clients=n, hold_ms=1 if mix == "mixed" else 0, elapsed_s=elapsed, acquisitions=total,
                 acq_per_s=total / elapsed, per_client_min=min(counts), per_client_max=max(counts))
        if mix == "mixed":
            r["writes"] = sum(writes)
            r["hold_mean_us"] = sum(held) / 1e3 / total if total else 0.0
        r.update(timeouts=sum(timeouts), violations=self.holders.violations)
        self.requests(r, p0, p1, 0, total)
        if failures:
            r["error"] = repr(failures[0])

    # ---------- W6, W6r ----------

    def drain(self, r, readers):
        cs = self.open(self.sizes["waiters"] + 1)
        path = self.lock_path(workload_name("W6r" if readers else "W6", self.sizes))
        self.drain_round({}, cs, path + "-warmup", readers)  # unmeasured
        self.drain_round(r, cs, path, readers)

    def drain_round(self, r, cs, path, readers):
        n = len(cs) - 1
        holder_client = cs[0]
        holder = holder_client.WriteLock(path)
        holder.acquire()
        self.holders.enter(True)
        locks = [(c.ReadLock(path) if readers else c.WriteLock(path)) for c in cs[1:]]
        acq_t, rel_t = [0] * n, [0] * n
        failed = []
        all_held = threading.Barrier(n, timeout=WAITER_TIMEOUT_S)

        def waiter(i):
            m = locks[i]
            try:
                try:
                    got = m.acquire(timeout=WAITER_TIMEOUT_S)
                except LockTimeout:
                    got = False
                if not got:
                    failed.append(None)
                    all_held.abort()
                    return
                acq_t[i] = clock()
                self.holders.enter(not readers)
                if readers:
                    all_held.wait()
                self.holders.leave(not readers)
                rel_t[i] = clock()
                m.release()
            except Exception as e:  # noqa: BLE001 - report, don't hang
                failed.append(e)

        watch0 = self.mntr("zk_watch_count")
        p0 = self.mntr("zk_packets_received")
        tq = clock()
        threads = [threading.Thread(target=waiter, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()

        # The holder's listings and the mntr polls are not the workload's
        # requests: count them, to subtract them.
        polls = mntr_polls = 0
        while True:
            polls += 1
            if len(holder_client.get_children(path)) >= n + 1:
                break
            time.sleep(POLL_S)
        until = clock() + WATCH_TIMEOUT_NS
        while True:
            mntr_polls += 1
            if self.mntr("zk_watch_count") - watch0 >= n or clock() >= until:
                break
            time.sleep(POLL_S)
        self.holders.leave(True)
        t_rel = clock()
        holder.release()
        for t in threads:
            t.join()
        p1 = self.mntr("zk_packets_received")

        held = sorted((i for i in range(n) if acq_t[i]), key=lambda i: acq_t[i])
        last = max([acq_t[i] if readers else rel_t[i] for i in held], default=t_rel)
        r.update(waiters=n, enqueue_s=(t_rel - tq) / 1e9, failed=len(failed), drain_s=(last - t_rel) / 1e9)
        if readers:
            wake = [acq_t[i] - t_rel for i in held]
            r.update(wake_mean_us=mean_us(wake), wake_p50_us=percentile_us(wake, 50),
                     wake_max_us=percentile_us(wake, 100))
        else:
            handoff, prev = [], t_rel
            for i in held:
                handoff.append(acq_t[i] - prev)
                prev = rel_t[i]
            r.update(handoff_mean_us=mean_us(handoff), handoff_p50_us=percentile_us(handoff, 50),
                     handoff_p99_us=percentile_us(handoff, 99))
        r["violations"] = self.holders.violations
        self.requests(r, p0, p1, polls + mntr_polls * len(self.servers), n)
        errors = [e for e in failed if e is not None]
        if errors:
            r["error"] = repr(errors[0])

    # ---------- the generator, for the test that every language draws alike ----------

    def splitmix(self, r):
        """first: the first 5 outputs of seeds 1..8 (top 53 bits); writes:
        draws >= 0.9 among each seed's first 1000."""
        first, writes = [], []
        for seed in range(1, CONTENDERS + 1):
            m = SplitMix64(seed)
            first.append([m.next53() for _ in range(5)])
            m = SplitMix64(seed)
            writes.append(sum(1 for _ in range(1000) if m.next() >= READ_SHARE))
        r.update(first=first, writes=writes)

    # ---------- one workload ----------

    def run(self, w):
        r = {"impl": "kazoo", "workload": workload_name(w, self.sizes)}

        def watchdog():
            r["error"] = "watchdog: the run took over %.0f s" % WATCHDOG_S
            print(dumps(r), flush=True)
            os._exit(3)

        run = {
            "W1": lambda: self.uncontended(r, True),
            "W2": lambda: self.uncontended(r, False),
            "W3": lambda: self.contended(r, "writes"),
            "W4": lambda: self.contended(r, "reads"),
            "W5": lambda: self.contended(r, "mixed"),
            "W6": lambda: self.drain(r, False),
            "W6r": lambda: self.drain(r, True),
            "splitmix64": lambda: self.splitmix(r),
        }.get(w)
        if run is None:
            r["error"] = "unknown workload %r" % w
            return r
        timer = threading.Timer(WATCHDOG_S, watchdog)
        timer.daemon = True
        timer.start()
        try:
            run()
        except Exception as e:  # noqa: BLE001 - one line per workload, whatever happens
            r["error"] = repr(e)
        finally:
            timer.cancel()
        return r


def dumps(r):
    """One JSON line, keys in the order set, floats to 3 decimals."""
    return json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()})


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: kazoo_bench.py CONNECT_STRING WORKLOAD...  (W1 W2 W3 W4 W5 W6 W6r)")
    sizes = sizes_from_env()
    failed = False
    for w in sys.argv[2:]:
        b = Bench(sys.argv[1], sizes)
        r = b.run(w)
        print(dumps(r), flush=True)
        b.close_clients()  # after printing: closing is not measured
        failed = failed or "error" in r
    sys.stdout.flush()
    os._exit(1 if failed else 0)  # don't wait for kazoo's threads


if __name__ == "__main__":
    main()
