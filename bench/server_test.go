package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zkserver"
)

// serversEnv names an existing server (or ensemble) to measure against, so
// that the peers and zkrwlock share one: host:port[,host:port...].
const serversEnv = "ZKRWLOCK_BENCH_SERVERS"

// ensembleEnv names the 3-node ensemble W9 measures against, in the same
// form. W9 never uses serversEnv, which names a standalone server in the
// comparison.
const ensembleEnv = "ZKRWLOCK_BENCH_ENSEMBLE"

const (
	startTimeout = 2 * time.Minute  // a throwaway server on a loaded machine
	dialTimeout  = 60 * time.Second // one client's session
	dialLimit    = 32               // sessions being created at once
	closeLimit   = 64               // sessions being closed at once
	mntrTimeout  = 5 * time.Second  // one mntr exchange, as the peers'
	pollEvery    = 10 * time.Millisecond
)

// servers is the ZooKeeper the benchmarks use: a throwaway one, started
// once per process, or the one named by ZKRWLOCK_BENCH_SERVERS.
type servers struct {
	addrs   []string
	cluster *zkserver.Cluster // nil for ZKRWLOCK_BENCH_SERVERS
}

// lazyServers are servers started on first use, once per process.
type lazyServers struct {
	once sync.Once
	s    *servers
	err  error
}

var shared, ensemble lazyServers

// get returns the servers, starting them with start on first use. Without
// ZooKeeper installed it skips the benchmark, or fails it when servers are
// required (zkserver.SkipOrFail).
func (l *lazyServers) get(b *testing.B, start func() (*servers, error)) *servers {
	b.Helper()
	l.once.Do(func() { l.s, l.err = start() })
	if errors.Is(l.err, errUnavailable) {
		zkserver.SkipOrFail(b, l.err)
	}
	if l.err != nil {
		b.Fatal(l.err)
	}
	return l.s
}

// sharedServers returns the process's standalone server: a throwaway one,
// warmed up, or the one named by ZKRWLOCK_BENCH_SERVERS.
func sharedServers(b *testing.B) *servers {
	b.Helper()
	return shared.get(b, func() (*servers, error) {
		s, err := startServers(serversEnv, 1)
		if err == nil {
			err = warmServer(s)
		}
		return s, err
	})
}

// ensembleServers returns W9's 3-node ensemble: a throwaway one, or the one
// named by ZKRWLOCK_BENCH_ENSEMBLE. W9's own first phase warms it up.
func ensembleServers(b *testing.B) *servers {
	b.Helper()
	return ensemble.get(b, func() (*servers, error) { return startServers(ensembleEnv, 3) })
}

var errUnavailable = errors.New("bench: no ZooKeeper server")

// startServers connects to the servers named by the environment variable
// env, or starts a throwaway cluster of members servers.
func startServers(env string, members int) (*servers, error) {
	if v := os.Getenv(env); v != "" {
		s := &servers{addrs: strings.Split(v, ",")}
		if _, err := s.mntr("zk_packets_received"); err != nil { // fail fast, not after dialTimeout
			return nil, fmt.Errorf("bench: %s=%s: %w", env, v, err)
		}
		return s, nil
	}
	if err := zkserver.Available(); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	// The comparison's server (bench/peers/zkserve): tickTime 2s,
	// maxSessionTimeout 60s, maxClientCnxns=0 (zkserver always sets it;
	// W6's 201 and BenchmarkDrain's 1001 sessions all come from 127.0.0.1),
	// data on tmpfs (zkserver's default Dir) and the same JVM heap.
	c, err := zkserver.StartCluster(ctx, zkserver.Config{
		Servers:           members,
		TickTime:          2 * time.Second,
		MaxSessionTimeout: 60 * time.Second,
		JavaOpts:          []string{"-Xms256m", "-Xmx1g"},
	})
	if err != nil {
		return nil, err
	}
	return &servers{addrs: c.Addrs(), cluster: c}, nil
}

var flagServerWarmup = flag.Duration("bench.serverwarmup", -1, "before the first benchmark, "+
	"8 clients loop Lock/Release this long, unmeasured, to warm up the server's JIT as the peers' "+
	"scripts/compare-peers.sh does with a discarded W3 (default 5s on a throwaway server, 1s with -short; "+
	"0 on ZKRWLOCK_BENCH_SERVERS, which compare-peers.sh has warmed; 0 skips it)")

// warmServer runs the unmeasured server warm-up: W3 without a record.
func warmServer(s *servers) error {
	d := *flagServerWarmup
	switch {
	case d >= 0:
	case s.cluster == nil:
		d = 0 // scripts/compare-peers.sh warms a server everyone shares
	case testing.Short():
		d = smoke.duration
	default:
		d = standard.duration
	}
	if d == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+dialTimeout)
	defer cancel()
	path := lockPath("warmup")
	deadline := time.Now().Add(d)
	var eg errgroup.Group
	for range contenders {
		eg.Go(func() error {
			c, err := rwlock.Dial(ctx, s.addrs, sessionTimeout)
			if err != nil {
				return err
			}
			defer (&sessions{conns: []*zk.Conn{c}}).close()
			l, err := rwlock.New(c, path)
			if err != nil {
				return err
			}
			for time.Now().Before(deadline) {
				g, err := l.Lock(ctx)
				if err != nil {
					return err
				}
				if err := g.Release(ctx); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return fmt.Errorf("bench: server warm-up: %w", err)
	}
	// The warm-up's sessions and garbage must not slow the first workload,
	// as they cannot in the peers' harnesses, where it is another process.
	settle := time.Now().Add(10 * time.Second)
	for time.Now().Before(settle) {
		if n, err := s.mntr("zk_num_alive_connections"); err != nil || n == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	runtime.GC()
	return nil
}

// closeShared stops the throwaway servers, if any were started.
func closeShared() error {
	var errs []error
	for _, l := range []*lazyServers{&shared, &ensemble} {
		if l.s != nil && l.s.cluster != nil {
			errs = append(errs, l.s.cluster.Close())
		}
	}
	return errors.Join(errs...)
}

// lockPath returns a fresh lock path, /rwbench/zkrwlock/<workload>-<ms>-<rand>.
func lockPath(name string) string {
	return fmt.Sprintf("/rwbench/zkrwlock/%s-%d-%d", name, time.Now().UnixMilli(), rand.Int32N(1<<30))
}

// dial opens n client sessions, each its own *zk.Conn made by rwlock.Dial
// with the 10s session timeout (-bench.scale.session with -bench.scale)
// and go-zookeeper's options opts, at most dialLimit at a time. The caller closes them (defer ss.close()), also when
// the run fails.
func (s *servers) dial(b *testing.B, n int, opts ...func(*zk.Conn)) *sessions {
	b.Helper()
	ss := &sessions{conns: make([]*zk.Conn, n)}
	var eg errgroup.Group
	eg.SetLimit(dialLimit)
	for i := range ss.conns {
		eg.Go(func() error {
			ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
			defer cancel()
			timeout := sessionTimeout
			if *flagScale {
				timeout = *flagScaleSession
			}
			c, err := rwlock.Dial(ctx, s.addrs, timeout, opts...)
			ss.conns[i] = c
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		ss.close()
		b.Fatalf("%d sessions: %v", n, err)
	}
	return ss
}

// sessions are one run's clients.
type sessions struct {
	conns []*zk.Conn
}

// close closes every session (closeSession removes its ephemeral nodes at
// once, not at expiry during the next run) and waits until each client's
// loops have stopped.
func (ss *sessions) close() {
	var wg sync.WaitGroup
	sem := make(chan struct{}, closeLimit)
	for _, c := range ss.conns {
		if c == nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c.Close()
			// The state turns StateDisconnected once the send and receive
			// loops have returned; go-zookeeper offers nothing closer.
			for deadline := time.Now().Add(10 * time.Second); c.State() != zk.StateDisconnected && time.Now().Before(deadline); {
				time.Sleep(pollEvery)
			}
		})
	}
	wg.Wait()
}

// lock returns the lock at path on session i.
func (ss *sessions) lock(b *testing.B, i int, path string, opts ...rwlock.Option) *rwlock.RWLock {
	b.Helper()
	l, err := rwlock.New(ss.conns[i], path, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// mntr returns the sum of an integer mntr statistic over the servers, as
// the peers' harnesses read it (each call is one packet on each server).
func (s *servers) mntr(key string) (int64, error) {
	var sum int64
	for _, addr := range s.addrs {
		v, err := mntrOne(addr, key)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// mustMntr is mntr for the benchmark goroutine.
func (s *servers) mustMntr(b *testing.B, key string) int64 {
	b.Helper()
	v, err := s.mntr(key)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

func mntrOne(addr, key string) (int64, error) {
	c, err := net.DialTimeout("tcp", addr, mntrTimeout)
	if err != nil {
		return 0, fmt.Errorf("mntr %s: %w", addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(mntrTimeout))
	if _, err := io.WriteString(c, "mntr"); err != nil {
		return 0, fmt.Errorf("mntr %s: %w", addr, err)
	}
	reply, err := io.ReadAll(c) // the server closes the connection after replying
	if err != nil {
		return 0, fmt.Errorf("mntr %s: %w", addr, err)
	}
	for line := range strings.Lines(string(reply)) {
		if k, v, ok := strings.Cut(strings.TrimRight(line, "\n"), "\t"); ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("mntr %s: %s: %w", addr, key, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("mntr %s: no %s in %q", addr, key, reply)
}
