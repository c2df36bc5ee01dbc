import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.retry.ExponentialBackoffRetry;

/**
 * LatchFailover measures Curator's LeaderLatch failover beside zkrwlock's
 * BenchmarkFailoverResign and BenchmarkFailoverKill (bench/election_test.go),
 * with the same session timeout: the time from the leader's close() (a
 * clean resign) to the next latch's await() return, and from a kill -9 of
 * the leader's process to it. The next latch is queued behind the leader
 * before each measure. It prints one JSON line per workload.
 *
 * Run by bench/peers/peer.sh curator-latch CONNECT_STRING PATH ROUNDS SESSION_MS.
 * With "leader" first, it is the leader's process: it leads, prints
 * "leading", and waits to be killed.
 */
public class LatchFailover {
    public static void main(String[] args) throws Exception {
        if (args.length == 4 && args[0].equals("leader")) {
            CuratorFramework c = client(args[1], Integer.parseInt(args[3]));
            LeaderLatch latch = new LeaderLatch(c, args[2], "leader");
            latch.start();
            latch.await();
            System.out.println("leading");
            System.out.flush();
            Thread.sleep(Long.MAX_VALUE);
            return;
        }
        if (args.length != 4) {
            System.err.println("usage: LatchFailover CONNECT_STRING PATH ROUNDS SESSION_MS");
            System.exit(2);
        }
        String connect = args[0], path = args[1];
        int rounds = Integer.parseInt(args[2]), session = Integer.parseInt(args[3]);
        List<Double> resign = new ArrayList<>(), kill = new ArrayList<>();
        for (int r = 0; r < rounds; r++) {
            resign.add(resignOnce(connect, path + "/resign-" + r, session));
            kill.add(killOnce(connect, path + "/kill-" + r, session));
        }
        print("failover-resign", session, resign);
        print("failover-kill", session, kill);
    }

    static CuratorFramework client(String connect, int session) {
        CuratorFramework c = CuratorFrameworkFactory.newClient(connect, session, 15_000,
                new ExponentialBackoffRetry(100, 3));
        c.start();
        return c;
    }

    // queued waits until the latch's node is in the queue, behind the leader's.
    static void queued(LeaderLatch next) throws Exception {
        while (next.getParticipants().size() < 2) {
            Thread.sleep(10); // the harness's wait, outside what is measured
        }
    }

    static double resignOnce(String connect, String path, int session) throws Exception {
        CuratorFramework a = client(connect, session), b = client(connect, session);
        LeaderLatch leader = new LeaderLatch(a, path, "a"), next = new LeaderLatch(b, path, "b");
        leader.start();
        leader.await();
        next.start();
        queued(next);
        long t0 = System.nanoTime();
        leader.close();
        next.await();
        double ms = (System.nanoTime() - t0) / 1e6;
        next.close();
        a.close();
        b.close();
        return ms;
    }

    static double killOnce(String connect, String path, int session) throws Exception {
        String java = System.getProperty("java.home") + "/bin/java";
        Process p = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
                System.getProperty("latch.src"), "leader", connect, path, Integer.toString(session))
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream()));
        String line = out.readLine();
        if (!"leading".equals(line)) {
            p.destroyForcibly();
            throw new IllegalStateException("the leader process printed " + line);
        }
        CuratorFramework b = client(connect, session);
        LeaderLatch next = new LeaderLatch(b, path, "b");
        next.start();
        queued(next);
        long t0 = System.nanoTime();
        p.destroyForcibly(); // SIGKILL
        next.await();
        double ms = (System.nanoTime() - t0) / 1e6;
        p.waitFor();
        next.close();
        b.close();
        return ms;
    }

    static void print(String workload, int session, List<Double> ms) {
        List<Double> sorted = new ArrayList<>(ms);
        Collections.sort(sorted);
        double p50 = sorted.get((int) Math.ceil(0.5 * sorted.size()) - 1);
        System.out.printf("{\"impl\": \"curator\", \"workload\": \"%s\", \"session_ms\": %d, \"samples\": %d, "
                + "\"p50_ms\": %.3f, \"max_ms\": %.3f}%n", workload, session, ms.size(), p50, sorted.get(sorted.size() - 1));
    }
}
