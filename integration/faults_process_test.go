package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// Environment of TestHelperHolder when TestFaultHolderKilled runs it as the
// holder process.
const (
	holderEnvServer  = "ZKRWLOCK_FAULT_HOLDER_SERVER"
	holderEnvPath    = "ZKRWLOCK_FAULT_HOLDER_PATH"
	holderEnvTimeout = "ZKRWLOCK_FAULT_HOLDER_TIMEOUT"
	holderEnvPermits = "ZKRWLOCK_FAULT_HOLDER_PERMITS" // capacity,weight: Acquire on a bounded lock instead (permits_test.go)
)

// TestHelperHolder is not a test: TestFaultHolderKilled runs the test binary
// again as a process that holds a lock, with the environment above. The
// process connects, takes the write lock, prints "held <node>" and blocks
// until it is killed. Without that environment it returns at once.
func TestHelperHolder(t *testing.T) {
	server := os.Getenv(holderEnvServer)
	if server == "" {
		return
	}
	timeout, err := time.ParseDuration(os.Getenv(holderEnvTimeout))
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := rwlock.Dial(ctx, []string{server}, timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(2)
	}
	var capacity, weight int64
	if p := os.Getenv(holderEnvPermits); p != "" {
		fmt.Sscanf(p, "%d,%d", &capacity, &weight)
	}
	var opts []rwlock.Option
	if capacity > 0 {
		opts = append(opts, rwlock.WithCapacity(capacity))
	}
	l, err := rwlock.New(conn, os.Getenv(holderEnvPath), opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(2)
	}
	acquire := l.Lock
	if capacity > 0 {
		acquire = func(ctx context.Context) (*rwlock.Grant, error) { return l.Acquire(ctx, weight) }
	}
	g, err := acquire(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(2)
	}
	fmt.Printf("held %s\n", g.Node())
	select {} // until SIGKILL
}

// A holder in another process dies by SIGKILL: its session lives on until
// the server expires it, and then a waiter gets the lock. That takes the
// session timeout, at most two of the server's ticks (it expires sessions
// in tick-sized buckets) and a margin; and at least two thirds of the
// timeout (the holder pinged the server no longer than a third ago).
func TestFaultHolderKilled(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	const timeout = 4 * time.Second
	srv := faultServer(t, 1) // its own: the times measured are the point
	path := zktest.LockPath(t, "/it")
	ctx := t.Context()

	holder := startHelper(t, "TestHelperHolder",
		holderEnvServer+"="+srv.Addr(0), holderEnvPath+"="+path, holderEnvTimeout+"="+timeout.String())
	node := strings.TrimPrefix(holder.line(t, time.Minute, "held "), "held ")

	waiter := connect(t, srv.Addr(0), timeout)
	w := goAcquire(t, ctx, waiter.lock(t, path).Lock)
	nodes := waitNodeCount(t, waiter.conn, path, 2, 10*time.Second)
	require.Contains(t, nodes, nodeName(node))
	w.stillWaiting(t, "the holder process holds the lock")

	killed := time.Now()
	require.NoError(t, syscall.Kill(holder.pid(), syscall.SIGKILL))
	require.ErrorContains(t, holder.reap(), "killed")
	wg := w.granted(t, timeout+2*faultTick+10*time.Second)
	took := w.at.Sub(killed)
	t.Logf("holder SIGKILLed → waiter granted %v (session timeout %v, tick %v)", msec(took), timeout, faultTick)
	require.LessOrEqual(t, took, timeout+2*faultTick+time.Second, "the dead holder's session should have expired by then")
	require.GreaterOrEqual(t, took, timeout/2, "granted before the dead holder's session could have expired")
	waitNodes(t, waiter.conn, path, time.Second, nodeName(wg.Node()))
	mustRelease(t, wg)
}
