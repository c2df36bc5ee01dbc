package zkserver

import (
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/zkrwlock/rwlock/internal/tier"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStandalone(t *testing.T) {
	ctx := t.Context()
	c := Start(t, Config{})
	require.Equal(t, 1, c.Len())
	require.Equal(t, c.Addr(0), c.ConnectString())
	reply, err := c.FourLetter(ctx, 0, "ruok")
	require.NoError(t, err)
	require.Equal(t, "imok", reply)
	leader, err := c.Leader()
	require.NoError(t, err)
	require.Equal(t, 0, leader, "a standalone server is its own leader")

	conn, _ := Connect(t, c.Addrs(), 10*time.Second)
	_, err = conn.Create("/node", []byte("v"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	t.Run("SumMntr counts requests", func(t *testing.T) {
		before, err := c.SumMntr(ctx, "zk_packets_received")
		require.NoError(t, err)
		for range 5 {
			_, _, err := conn.Get("/node")
			require.NoError(t, err)
		}
		after, err := c.SumMntr(ctx, "zk_packets_received")
		require.NoError(t, err)
		require.GreaterOrEqual(t, after-before, int64(5))
	})

	t.Run("wchp lists watches", func(t *testing.T) {
		_, _, _, err := conn.GetW("/node")
		require.NoError(t, err)
		reply, err := c.FourLetter(ctx, 0, "wchp")
		require.NoError(t, err)
		require.Contains(t, reply, "/node")
	})

	t.Run("Stop then Start keeps address, data and session", func(t *testing.T) {
		sid, pid := conn.SessionID(), pidOf(c, 0)
		require.NoError(t, c.Stop(0))
		requireGone(t, pid)
		_, err := c.FourLetter(ctx, 0, "ruok")
		require.Error(t, err, "a stopped server must not answer")
		require.Error(t, c.Stop(0), "stopping twice")

		require.NoError(t, c.Start(ctx, 0))
		require.Error(t, c.Start(ctx, 0), "starting twice")
		// A Get sent as the old connection died may wait for go-zookeeper's
		// read deadline, two thirds of the session timeout, before it fails
		// and the client dials again: allow a few of those.
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			data, _, err := conn.Get("/node")
			assert.NoError(ct, err)
			assert.Equal(ct, "v", string(data))
		}, 45*time.Second, 50*time.Millisecond)
		require.Equal(t, sid, conn.SessionID(), "sessions survive a restart within their timeout")
	})

	pid := pidOf(c, 0)
	dir := c.Dir()
	require.NoError(t, c.Close())
	requireGone(t, pid)
	require.NoDirExists(t, dir)
	require.NoError(t, c.Close(), "closing twice")
	require.Error(t, c.Start(ctx, 0), "starting after Close")
}

func TestEnsemble(t *testing.T) {
	tier.Long(t)
	ctx := t.Context()
	c := Start(t, Config{Servers: 3})
	require.Equal(t, 3, c.Len())
	require.Len(t, strings.Split(c.ConnectString(), ","), 3)
	leader, err := c.Leader()
	require.NoError(t, err)
	modes := map[string]int{}
	for i := range c.Len() {
		modes[mode(ctx, c.Addr(i))]++
	}
	require.Equal(t, map[string]int{"leader": 1, "follower": 2}, modes)

	conn, _ := Connect(t, c.Addrs(), 20*time.Second)
	_, err = conn.Create("/e", []byte("before"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	sid := conn.SessionID()

	start := time.Now()
	require.NoError(t, c.Kill(leader))
	newLeader, err := c.Leader()
	require.NoError(t, err)
	require.NotEqual(t, leader, newLeader)
	t.Logf("new leader %d elected %v after the kill", newLeader, time.Since(start).Round(time.Millisecond))

	require.Eventually(t, func() bool {
		_, err := conn.Set("/e", []byte("after"), -1)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the client must keep working with two of three members")
	require.Equal(t, sid, conn.SessionID(), "the session survives the leader's loss")
	t.Logf("client working again %v after the kill", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	require.NoError(t, c.Start(ctx, leader))
	t.Logf("member %d rejoined in %v", leader, time.Since(start).Round(time.Millisecond))
	require.Equal(t, "follower", mode(ctx, c.Addr(leader)))
	require.NoError(t, c.WaitServing(ctx))
	sum, err := c.SumMntr(ctx, "zk_packets_received")
	require.NoError(t, err)
	require.Positive(t, sum)

	// The rejoined member synced the write it missed.
	direct, _ := Connect(t, []string{c.Addr(leader)}, 20*time.Second)
	data, _, err := direct.Get("/e")
	require.NoError(t, err)
	require.Equal(t, "after", string(data))

	// Expiry through one member reaches a client of any member, even
	// though the client reconnects to another member at once.
	expiring, rec := Connect(t, c.Addrs(), 20*time.Second)
	_, err = expiring.Create("/eph", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	id, passwd, _, ok := rec.Session()
	require.True(t, ok)
	for i := range c.Len() {
		require.NoError(t, ExpireSession(ctx, c.Addr(i), id, passwd), "via member %d", i)
		require.Eventually(t, func() bool {
			return expiring.State() == zk.StateHasSession && expiring.SessionID() != id
		}, 30*time.Second, 10*time.Millisecond)
		exists, _, err := conn.Exists("/eph")
		require.NoError(t, err)
		require.False(t, exists)
		_, err = expiring.Create("/eph", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
		id, passwd, _, ok = rec.Session()
		require.True(t, ok)
	}

	pids := []int{pidOf(c, 0), pidOf(c, 1), pidOf(c, 2)}
	require.NoError(t, c.Close())
	for _, pid := range pids {
		requireGone(t, pid)
	}
}

func TestTakenPortIsDetected(t *testing.T) {
	SkipUnlessAvailable(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()

	java, classpath, err := locate()
	require.NoError(t, err)
	cfg, err := Config{}.withDefaults()
	require.NoError(t, err)
	c := &Cluster{cfg: cfg, java: java, classpath: classpath, dir: t.TempDir()}
	ports, err := freePorts(2)
	require.NoError(t, err)
	m := &member{dir: c.dir, clientPort: taken.Addr().(*net.TCPAddr).Port, quorumPort: ports[0], electionPort: ports[1]}
	c.members = []*member{m}
	require.NoError(t, c.writeConfig(m))
	c.mu.Lock()
	require.NoError(t, c.launch(m))
	c.mu.Unlock()
	defer c.killAll()

	err = c.waitServing(t.Context(), c.members)
	require.ErrorIs(t, err, errPortTaken, "StartCluster retries only on this error")
}

func TestBindFailureAfterServingIsTheServersToHandle(t *testing.T) {
	c := Start(t, Config{})
	// What a member logs when a quorum port is taken as it becomes leader
	// long after it first served; it then goes back to electing.
	f, err := os.OpenFile(c.members[0].logPath(), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("java.net.BindException: Address already in use\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())

	require.NoError(t, c.WaitServing(t.Context()))
}

func TestFreePorts(t *testing.T) {
	ports, err := freePorts(30)
	require.NoError(t, err)
	seen := map[int]bool{}
	for _, p := range ports {
		require.False(t, seen[p], "port %d twice", p)
		seen[p] = true
	}
	lo, hi := portRange()
	if lo == hi {
		t.Log("no room below this machine's ephemeral port range: the kernel picked the ports")
		return
	}
	for _, p := range ports {
		require.GreaterOrEqual(t, p, lo)
		require.Less(t, p, hi, "the ephemeral range starts at %d", hi)
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := Config{}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, 1, cfg.Servers)
	require.Equal(t, 2*time.Second, cfg.TickTime)
	require.Equal(t, 4*time.Second, cfg.MinSessionTimeout)
	require.Equal(t, 60*time.Second, cfg.MaxSessionTimeout)

	for _, bad := range []Config{
		{Servers: -1},
		{TickTime: time.Microsecond},
		{MinSessionTimeout: time.Minute, MaxSessionTimeout: time.Second},
	} {
		_, err := bad.withDefaults()
		require.Error(t, err, "%+v", bad)
	}
}

func TestPrefixWriter(t *testing.T) {
	var (
		out strings.Builder
		mu  sync.Mutex
	)
	pw := &prefixWriter{mu: &mu, w: &out, prefix: "zk0 | "}
	for _, chunk := range []string{"a", "b\nc", "\n", "d\ne\n", "f"} {
		n, err := pw.Write([]byte(chunk))
		require.NoError(t, err)
		require.Equal(t, len(chunk), n)
	}
	require.Equal(t, "zk0 | ab\nzk0 | c\nzk0 | d\nzk0 | e\n", out.String())
}

func pidOf(c *Cluster, i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i].proc.cmd.Process.Pid
}

// requireGone checks that pid no longer exists: exited and reaped.
func requireGone(t *testing.T, pid int) {
	t.Helper()
	err := syscall.Kill(pid, 0)
	assert.True(t, errors.Is(err, syscall.ESRCH), "pid %d still exists (kill -0: %v)", pid, err)
}
