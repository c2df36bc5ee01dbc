package rwlocktest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock/internal/zkclient"
	"github.com/zkrwlock/rwlock/internal/zkserver"
)

// A Server is a throwaway ZooKeeper for one test: a standalone server or an
// ensemble of server processes on 127.0.0.1, each with free ports and a
// data directory of its own. The test's cleanup stops it and removes its
// files, and a server never outlives the test binary. Its methods are safe
// for concurrent use.
//
// It runs Apache ZooKeeper on the installed JVM: Debian's zookeeper
// package (apt-get install zookeeper), or the jars that the environment
// variable ZOOKEEPER_CLASSPATH names. Without either, the test is skipped
// with a message that says what is missing. Set ZKRWLOCK_REQUIRE_ZK=1 (or
// CI) to fail it instead.
type Server struct {
	c *zkserver.Cluster
}

// StartServer starts a standalone ZooKeeper server for t and waits until it
// serves; t.Cleanup stops it. A loaded machine may take seconds, an idle
// one about one. It starts one under -short too: a test that should not
// checks testing.Short itself.
func StartServer(t testing.TB) *Server {
	t.Helper()
	return start(t, 1)
}

// StartEnsemble starts an ensemble of members servers (3 keeps serving
// with one member down) for t, and waits until a quorum has formed;
// t.Cleanup stops it. An even or negative number fails the test, since an
// ensemble of 2 stops with either member and 4 tolerates no more than 3.
func StartEnsemble(t testing.TB, members int) *Server {
	t.Helper()
	if members < 1 || members%2 == 0 {
		t.Fatalf("rwlocktest: StartEnsemble with %d members; want an odd number, such as 3", members)
	}
	return start(t, members)
}

func start(t testing.TB, members int) *Server {
	if err := zkserver.Available(); err != nil {
		zkserver.SkipOrFail(t, fmt.Errorf("rwlocktest: %w (a user of the module installs Debian's zookeeper package, "+
			"or sets ZOOKEEPER_CLASSPATH to ZooKeeper's jars)", err))
	}
	c, err := zkserver.StartCluster(t.Context(), zkserver.Config{Servers: members})
	if err != nil {
		t.Fatalf("rwlocktest: start ZooKeeper: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i := range c.Len() {
				t.Logf("rwlocktest: the end of server %d's log:\n%s", i, c.LogTail(i, 40))
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("rwlocktest: stop ZooKeeper: %v", err)
		}
	})
	return &Server{c: c}
}

// Addrs returns the members' client addresses, "127.0.0.1:port", for
// [rwlock.Dial] or zk.Connect. A stopped member keeps its address.
func (s *Server) Addrs() []string { return s.c.Addrs() }

// ConnectString returns the addresses joined by commas, as the zkrwlock
// command's --zk flag and other ZooKeeper clients take them.
func (s *Server) ConnectString() string { return strings.Join(s.Addrs(), ",") }

// dialTimeout bounds Dial's wait for a session on a loaded machine.
const dialTimeout = 30 * time.Second

// Dial connects to the server with the session timeout sessionTimeout, as
// [rwlock.Dial] does, so that locks on the connection know the timeout the
// server granted. It fails the test if there is no session within 30s.
// t.Cleanup closes the connection and waits until go-zookeeper's goroutines
// have ended, so that a leak check (go.uber.org/goleak) after the test
// finds none of them. Its logging is off.
func (s *Server) Dial(t testing.TB, sessionTimeout time.Duration) *zk.Conn {
	t.Helper()
	conn, events, err := zkclient.Connect(s.Addrs(), sessionTimeout, zk.WithLogger(quiet{}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("rwlocktest: connect to %v: %v", s.Addrs(), err)
	}
	t.Cleanup(func() {
		conn.Close()
		// go-zookeeper closes the event channel once its goroutines are
		// done. Close alone does not wait for that.
		for range events {
		}
	})
	timeout := time.After(dialTimeout)
	for conn.State() != zk.StateHasSession { // the state changes before its event is sent
		select {
		case <-events:
		case <-timeout:
			t.Fatalf("rwlocktest: no session with %v after %v (state %v)", s.Addrs(), dialTimeout, conn.State())
		}
	}
	return conn
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// Stop stops member i (from 0) gracefully and waits until it has exited:
// an outage, as a restart for maintenance makes one. Clients see their
// connection close, and reconnect to another member, or to this one after
// Start. The session survives unless the outage outlasts its timeout.
func (s *Server) Stop(i int) error { return s.wrap(s.c.Stop(i)) }

// Kill kills member i with SIGKILL and waits until it has exited: a crash,
// with no chance to close its sockets. Clients learn of it only when their
// own timeouts fire.
func (s *Server) Kill(i int) error { return s.wrap(s.c.Kill(i)) }

// Start restarts member i after Stop or Kill, on the same address and with
// its data, and waits until it serves or ctx ends. An ensemble member
// serves only once a quorum is up. So to restart several, call Start for
// each at once, from goroutines.
func (s *Server) Start(ctx context.Context, i int) error { return s.wrap(s.c.Start(ctx, i)) }

func (s *Server) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("rwlocktest: %w", err)
}
