"""kazoo lock clients that share a lock path with zkrwlock in the
integration tests (integration/peers_test.go), all in one process, each
with a ZooKeeper session of its own. Run with Debian's /usr/bin/python3
(python3-kazoo).

  contender.py CONNECT PATH SESSION_MS HOLD_MS NAME:KIND:COUNT...

KIND: read (ReadLock), write (WriteLock), lock (Lock); read-native,
write-native and lock-native are ReadLock, WriteLock and Lock with the
extra_lock_patterns that let them see zkrwlock's native names. COUNT:
acquire, hold HOLD_MS, release, COUNT times; 0: acquire once and hold
until a second line on stdin (or until killed). The output is
Contender.java's: "ready", then after a line on stdin, "acq NANOS NAME
NODE", "rel NANOS NAME NODE", "done NAME", "error NAME MESSAGE", with times
from CLOCK_MONOTONIC.
"""
import os
import random
import sys
import threading
import time

from kazoo.client import KazooClient

out = threading.Lock()


def say(line):
    with out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def make_lock(client, path, kind):
    if kind == "read":
        return client.ReadLock(path)
    if kind == "write":
        return client.WriteLock(path)
    if kind == "lock":
        return client.Lock(path)
    if kind == "read-native":
        return client.ReadLock(path, extra_lock_patterns=("write-",))
    if kind == "write-native":
        return client.WriteLock(path, extra_lock_patterns=("write-", "read-"))
    if kind == "lock-native":
        return client.Lock(path, extra_lock_patterns=("write-", "read-"))
    raise ValueError("unknown kind " + kind)


def contend(name, lock, count, hold, go, let_go):
    try:
        go.wait()
        for _ in range(max(count, 1)):
            lock.acquire()
            node = lock.node
            say("acq %d %s %s" % (time.monotonic_ns(), name, node))
            if count == 0:
                let_go.wait()
            else:
                time.sleep(hold)
            say("rel %d %s %s" % (time.monotonic_ns(), name, node))
            lock.release()
            time.sleep(random.uniform(0, hold))
        say("done " + name)
    except BaseException as e:  # noqa: B902: any failure ends the run
        say("error %s %r" % (name, e))
        os._exit(1)


def main():
    cs, path = sys.argv[1], sys.argv[2]
    session = int(sys.argv[3]) / 1000.0
    hold = int(sys.argv[4]) / 1000.0
    go, let_go = threading.Event(), threading.Event()
    threads = []
    for spec in sys.argv[5:]:
        name, kind, count = spec.split(":")
        client = KazooClient(hosts=cs, timeout=session)
        client.start(timeout=30)
        lock = make_lock(client, path, kind)
        t = threading.Thread(target=contend, args=(name, lock, int(count), hold, go, let_go), daemon=True)
        threads.append(t)
        t.start()
    say("ready")
    sys.stdin.readline()
    go.set()

    def wait_let_go():
        sys.stdin.readline()  # a line, or EOF
        let_go.set()

    threading.Thread(target=wait_let_go, daemon=True).start()
    for t in threads:
        t.join()
    # The sessions end with the process; their nodes are gone already.
    os._exit(0)


if __name__ == "__main__":
    main()
