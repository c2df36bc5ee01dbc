// Contender: Apache Curator lock clients that share a lock path with
// zkrwlock in the integration tests (integration/peers_test.go), all in one
// JVM, each with a ZooKeeper session of its own.
//
//   java Contender CONNECT PATH SESSION_MS HOLD_MS NAME:KIND:COUNT...
//
// KIND: rwread, rwwrite (InterProcessReadWriteLock), mutex (InterProcessMutex).
// COUNT: acquire, hold HOLD_MS, release, COUNT times; 0: acquire once and
// hold until a second line on stdin (or until killed). Once every client is
// connected it prints "ready" and waits for a line on stdin, so that all
// contenders start together. Then,
// on stdout, one line per event, times from System.nanoTime (on Linux the
// system-wide CLOCK_MONOTONIC, which Go and Python read too):
//
//   acq NANOS NAME NODE      after acquire returned; NODE is the lock node's name
//   rel NANOS NAME NODE      just before release
//   done NAME                after its last release
//   error NAME MESSAGE       then the JVM exits 1
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class Contender {
    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] a) throws Exception {
        String cs = a[0], path = a[1];
        int sessionMs = Integer.parseInt(a[2]);
        long holdMs = Long.parseLong(a[3]);
        // InterProcessMutex keeps the path of its node to itself.
        Method lockPath = InterProcessMutex.class.getDeclaredMethod("getLockPath");
        lockPath.setAccessible(true);

        List<Thread> threads = new ArrayList<>();
        CountDownLatch go = new CountDownLatch(1), letGo = new CountDownLatch(1);
        for (int i = 4; i < a.length; i++) {
            String[] spec = a[i].split(":");
            String name = spec[0], kind = spec[1];
            int count = Integer.parseInt(spec[2]);
            CuratorFramework c = CuratorFrameworkFactory.builder().connectString(cs).sessionTimeoutMs(sessionMs)
                    .connectionTimeoutMs(15_000).retryPolicy(new ExponentialBackoffRetry(100, 3))
                    .ensembleTracker(false).build();
            c.start();
            if (!c.blockUntilConnected(30, TimeUnit.SECONDS)) {
                say("error " + name + " no connection within 30s");
                Runtime.getRuntime().halt(1);
            }
            InterProcessMutex lock;
            switch (kind) {
                case "rwread": lock = new InterProcessReadWriteLock(c, path).readLock(); break;
                case "rwwrite": lock = new InterProcessReadWriteLock(c, path).writeLock(); break;
                case "mutex": lock = new InterProcessMutex(c, path); break;
                default: throw new IllegalArgumentException("unknown kind " + kind);
            }
            threads.add(new Thread(() -> {
                try {
                    go.await();
                    for (int n = 0; n < Math.max(count, 1); n++) {
                        lock.acquire();
                        String node = (String) lockPath.invoke(lock);
                        node = node.substring(node.lastIndexOf('/') + 1);
                        say("acq " + System.nanoTime() + " " + name + " " + node);
                        if (count == 0) {
                            letGo.await();
                        } else {
                            Thread.sleep(holdMs);
                        }
                        say("rel " + System.nanoTime() + " " + name + " " + node);
                        lock.release();
                        Thread.sleep(ThreadLocalRandom.current().nextLong(holdMs + 1));
                    }
                    say("done " + name);
                } catch (Throwable e) {
                    say("error " + name + " " + e);
                    Runtime.getRuntime().halt(1);
                }
            }));
        }
        for (Thread t : threads) t.start();
        say("ready");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        in.readLine();
        go.countDown();
        Thread stdin = new Thread(() -> {
            try {
                in.readLine();
            } catch (Exception e) {
                // EOF or closed: let go too
            }
            letGo.countDown();
        });
        stdin.setDaemon(true);
        stdin.start();
        for (Thread t : threads) t.join();
        System.out.flush();
        // Sessions end with the process: the locks are released already,
        // and closing 3.8's clients one by one takes 100ms each.
        Runtime.getRuntime().halt(0);
    }
}
