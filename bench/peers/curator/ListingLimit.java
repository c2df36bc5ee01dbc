import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;

/**
 * ListingLimit takes Curator's read lock on a path, as a default Curator
 * client does (ZooKeeper's client with its default jute.maxbuffer), and
 * prints one JSON line: granted, timeout or error, and how often the
 * connection was suspended on the way. A lock directory whose listing
 * exceeds the client's jute.maxbuffer makes the client drop its connection
 * at every listing (apache/helix#962): the lock is never granted.
 *
 * Run by bench/peers/peer.sh curator-listing CONNECT_STRING PATH SECONDS.
 */
public class ListingLimit {
    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: ListingLimit CONNECT_STRING PATH SECONDS");
            System.exit(2);
        }
        AtomicInteger suspended = new AtomicInteger();
        CuratorFramework client = CuratorFrameworkFactory.newClient(args[0], 10_000, 15_000,
                new ExponentialBackoffRetry(100, 3));
        client.getConnectionStateListenable().addListener((c, state) -> {
            if (state == ConnectionState.SUSPENDED) {
                suspended.incrementAndGet();
            }
        });
        client.start();
        String result;
        String error = "";
        try {
            InterProcessReadWriteLock lock = new InterProcessReadWriteLock(client, args[1]);
            if (lock.readLock().acquire(Integer.parseInt(args[2]), TimeUnit.SECONDS)) {
                result = "granted";
                lock.readLock().release();
            } else {
                result = "timeout";
            }
        } catch (Exception e) {
            result = "error";
            error = e.toString();
        }
        client.close();
        System.out.printf("{\"impl\": \"curator\", \"result\": \"%s\", \"suspended\": %d, \"error\": \"%s\"}%n",
                result, suspended.get(), error.replace("\\", "\\\\").replace("\"", "'"));
    }
}
