package zkserver

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// connectTimeout bounds Connect's wait for a session.
const connectTimeout = 30 * time.Second

// closeTimeout bounds the wait for a closed zk.Conn's goroutines. They end
// once the server has answered the close request; under -race, with a
// package's tests in parallel on two cores, a run once found them still
// running 30 s after Close (cause not found; the package's goleak check
// passed, so they did end). A connection that never ends still fails.
const closeTimeout = 2 * time.Minute

// Start starts a cluster for the test and closes it in t.Cleanup, first
// logging the end of every member's log if the test failed.
//
// Without java or the server jars it skips the test, or fails it when
// ZKRWLOCK_REQUIRE_ZK=1 or CI is set. With -short it skips unless
// ZKRWLOCK_REQUIRE_ZK=1.
func Start(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	SkipUnlessAvailable(t)
	c, err := StartCluster(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i := range c.Len() {
				t.Logf("zkserver: last lines of member %d's log (%s):\n%s", i, c.members[i].logPath(), c.LogTail(i, 40))
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("zkserver: close: %v", err)
		}
	})
	return c
}

// SkipUnlessAvailable skips the test when real servers are not wanted
// (-short) or not installed, unless ZKRWLOCK_REQUIRE_ZK=1 (or CI) asks for
// them: then a missing server fails the test. Start applies it.
func SkipUnlessAvailable(t testing.TB) {
	t.Helper()
	if testing.Short() && os.Getenv("ZKRWLOCK_REQUIRE_ZK") != "1" {
		t.Skip("zkserver: real ZooKeeper servers are skipped in -short mode (set ZKRWLOCK_REQUIRE_ZK=1 to run them)")
	}
	if err := Available(); err != nil {
		SkipOrFail(t, err)
	}
}

// SkipOrFail skips the test because err says that no server can run here,
// or fails it when servers are required: ZKRWLOCK_REQUIRE_ZK=1, or CI set.
func SkipOrFail(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("ZKRWLOCK_REQUIRE_ZK") == "1" || os.Getenv("CI") != "" {
		t.Fatal(err)
	}
	t.Skipf("%v (set ZKRWLOCK_REQUIRE_ZK=1 to fail instead)", err)
}

// StartStandalone starts one server with the default Config; see [Start].
func StartStandalone(t testing.TB) *Cluster {
	t.Helper()
	return Start(t, Config{Servers: 1})
}

// StartEnsemble starts a 3-member ensemble with the default Config; see [Start].
func StartEnsemble(t testing.TB) *Cluster {
	t.Helper()
	return Start(t, Config{Servers: 3})
}

// Connect connects a go-zookeeper client to servers through a
// [SessionRecorder], with logging off, and waits for its session. It fails
// the test if there is none after 30s. t.Cleanup closes the connection and
// waits until its goroutines have ended.
func Connect(t testing.TB, servers []string, sessionTimeout time.Duration) (*zk.Conn, *SessionRecorder) {
	t.Helper()
	rec := &SessionRecorder{}
	conn, events, err := zk.Connect(servers, sessionTimeout,
		zk.WithDialer(rec.Dial), zk.WithLogger(quietLogger{}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("zkserver: connect to %v: %v", servers, err)
	}
	t.Cleanup(func() {
		conn.Close()
		// go-zookeeper closes the event channel once its goroutines are done;
		// Close alone does not wait for that.
		timeout := time.After(closeTimeout)
		for {
			select {
			case _, ok := <-events:
				if !ok {
					return
				}
			case <-timeout:
				t.Errorf("zkserver: zk.Conn to %v still running %v after Close", servers, closeTimeout)
				return
			}
		}
	})
	timeout := time.After(connectTimeout)
	for conn.State() != zk.StateHasSession { // the state changes before its event is sent
		select {
		case <-events:
		case <-timeout:
			t.Fatalf("zkserver: no session with %v after %v (state %v)", servers, connectTimeout, conn.State())
		}
	}
	return conn, rec
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// Shared is one cluster, started by the first test that asks for it and
// used by every test of a package that does not break its servers (each
// with lock paths of its own). TestMain closes it after m.Run.
type Shared struct {
	Config Config

	once    sync.Once
	cluster *Cluster
	err     error
}

// Get returns the cluster, starting it on first use; it skips or fails the
// test as SkipUnlessAvailable does.
func (s *Shared) Get(t testing.TB) *Cluster {
	t.Helper()
	SkipUnlessAvailable(t)
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s.cluster, s.err = StartCluster(ctx, s.Config)
	})
	if s.err != nil {
		t.Fatalf("zkserver: shared cluster: %v", s.err)
	}
	return s.cluster
}

// Close stops the cluster, if it was started.
func (s *Shared) Close() error {
	if s.cluster == nil {
		return nil
	}
	return s.cluster.Close()
}

// Started returns the cluster if a test has started it, else nil.
func (s *Shared) Started() *Cluster { return s.cluster }
