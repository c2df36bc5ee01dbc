// SeedSnapshot writes a ZooKeeper snapshot with persistent nodes whose
// child-version counter (cversion) starts where the caller says, into each
// data dir named on the command line (the snapshot goes to DIR/version-2).
// Lines on stdin name the nodes: "<cversion> <path>". zkserver runs it with
// the server's own jars, in the java launcher's source-file mode, before a
// member first starts: see Config.Seed.
//
// It builds the tree with ZooKeeper's own DataTree, so that the snapshot
// (digest, checksum) is what the server itself would write. A node's
// cversion is set the way a transaction log replay sets it: by creating a
// child with that parent cversion, then deleting the child, which leaves
// the counter alone.

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.server.DataTree;
import org.apache.zookeeper.server.persistence.FileTxnSnapLog;

public class SeedSnapshot {
    public static void main(String[] args) throws Exception {
        DataTree dt = new DataTree();
        long zxid = 0;
        long now = System.currentTimeMillis();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        for (String line; (line = in.readLine()) != null;) {
            if (line.isEmpty()) {
                continue;
            }
            int sp = line.indexOf(' ');
            int cversion = Integer.parseInt(line.substring(0, sp));
            String path = line.substring(sp + 1);
            String p = "";
            for (String part : path.substring(1).split("/")) {
                p = p + "/" + part;
                if (dt.getNode(p) == null) {
                    dt.createNode(p, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, 0, -1, ++zxid, now);
                }
            }
            if (cversion > dt.getNode(path).stat.getCversion()) {
                String seed = path + "/zkserver-seed";
                dt.createNode(seed, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, 0, cversion, ++zxid, now);
                dt.deleteNode(seed, ++zxid);
            }
            int got = dt.getNode(path).stat.getCversion();
            if (got != cversion) {
                throw new IllegalStateException(path + ": cversion " + got + ", want " + cversion);
            }
        }
        dt.lastProcessedZxid = zxid;
        for (String dir : args) {
            FileTxnSnapLog snap = new FileTxnSnapLog(new File(dir), new File(dir));
            snap.save(dt, new ConcurrentHashMap<>(), true);
            snap.close();
        }
    }
}
