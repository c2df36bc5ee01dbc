// Package zkserver starts throwaway Apache ZooKeeper servers on 127.0.0.1 for
// tests, benchmarks, the demo and `zkrwlock dev`: one standalone server or an
// ensemble of several server processes, each with its own free ports and data
// directory.
//
// It runs Debian's zookeeper package (or the jars named by ZOOKEEPER_CLASSPATH)
// on the installed JVM; scripts/install-zookeeper.sh installs it. A server
// never outlives the Go process that started it.
//
// Tests use [Start] (or [StartStandalone], [StartEnsemble]), which skips the
// test when no server is installed and stops the cluster in t.Cleanup.
// Programs use [StartCluster] and [Cluster.Close].
package zkserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Debian's zookeeper package. zookeeper.jar's manifest Class-Path names the
// jute, netty and other jars it needs, but no slf4j binding: log4j is added so
// that the server log reaches zk.log, configured by the conf dir's
// log4j.properties.
const (
	debianConfDir = "/etc/zookeeper/conf"
	debianJar     = "/usr/share/java/zookeeper.jar"
	debianSLF4J   = "/usr/share/java/slf4j-log4j12.jar"
	debianLog4j   = "/usr/share/java/log4j-1.2.jar"
)

const (
	defaultTickTime          = 2 * time.Second  // ZooKeeper's own default
	defaultMaxSessionTimeout = 60 * time.Second // ZooKeeper's is 20 ticks; long sessions help debugging
	stopGrace                = 5 * time.Second  // SIGTERM to SIGKILL
	maxStartAttempts         = 3                // fresh ports each time, for ports taken meanwhile

	// How long a member may take to serve. An idle 2-core machine starts a
	// standalone server in 0.6s and an ensemble in 2.5s; a loaded one, with
	// other tests' JVMs, in many times that.
	standaloneStartTimeout = 30 * time.Second
	ensembleStartTimeout   = 60 * time.Second
)

// Config describes a cluster. The zero value is a standalone server with
// ZooKeeper's default timing.
type Config struct {
	// Servers is the number of members: 1 (the default) runs a standalone
	// server, 3 an ensemble that keeps serving with one member down.
	Servers int

	// TickTime is ZooKeeper's time unit (default 2s, its own default). The
	// server checks session expiry once per tick, and an ensemble's
	// initLimit and syncLimit are counted in ticks.
	TickTime time.Duration

	// MinSessionTimeout and MaxSessionTimeout bound the session timeout a
	// client may negotiate. Defaults: 2 ticks (ZooKeeper's default) and 60s.
	MinSessionTimeout time.Duration
	MaxSessionTimeout time.Duration

	// Dir holds one directory per member (Dir/member-<i>, with the data dir,
	// zoo.cfg and zk.log). A Dir given here is kept by Close. By default a
	// new temporary directory is made under /dev/shm when that is writable
	// (on disk, fsync stalls dominate ZooKeeper's latency), else under
	// os.TempDir(), and Close removes it.
	Dir string

	// JavaOpts are the JVM options (default a small heap, -Xms64m -Xmx512m,
	// which starts fast and is enough for the benchmarks).
	JavaOpts []string

	// Seed lists persistent nodes the cluster starts with, written into
	// every member's data dir as a snapshot before the first start; with
	// them, a test can start a directory's sequence counter near its end.
	// Each costs nothing once started, but seeding runs a JVM (about a
	// second).
	Seed []Node

	// Log, if set, also receives every member's output, each line prefixed
	// with "zk<i> | ". Writes are serialized, and an error only drops the
	// lines. The per-member zk.log is always written.
	Log io.Writer
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.Servers == 0 {
		cfg.Servers = 1
	}
	if cfg.TickTime == 0 {
		cfg.TickTime = defaultTickTime
	}
	if cfg.MinSessionTimeout == 0 {
		cfg.MinSessionTimeout = 2 * cfg.TickTime
	}
	if cfg.MaxSessionTimeout == 0 {
		cfg.MaxSessionTimeout = defaultMaxSessionTimeout
	}
	if cfg.JavaOpts == nil {
		cfg.JavaOpts = []string{"-Xms64m", "-Xmx512m"}
	}
	switch {
	case cfg.Servers < 1:
		return cfg, fmt.Errorf("zkserver: Servers = %d, want at least 1", cfg.Servers)
	case cfg.TickTime < time.Millisecond:
		return cfg, fmt.Errorf("zkserver: TickTime = %v, want at least 1ms", cfg.TickTime)
	case cfg.MinSessionTimeout > cfg.MaxSessionTimeout:
		return cfg, fmt.Errorf("zkserver: MinSessionTimeout %v > MaxSessionTimeout %v",
			cfg.MinSessionTimeout, cfg.MaxSessionTimeout)
	}
	return cfg, nil
}

// Available reports whether a ZooKeeper server can be started here: nil when
// java and the server jars are found, else an error that says what is missing
// and how to install it.
func Available() error {
	_, _, err := locate()
	return err
}

// locate finds the java binary ($JAVA, else PATH) and the server classpath
// ($ZOOKEEPER_CLASSPATH, else Debian's jars).
func locate() (java, classpath string, err error) {
	java = os.Getenv("JAVA")
	if java == "" {
		java = "java"
	}
	if java, err = exec.LookPath(java); err != nil {
		return "", "", fmt.Errorf("zkserver: no java (set JAVA or put it on PATH; "+
			"scripts/install-zookeeper.sh installs ZooKeeper and a JRE): %w", err)
	}
	if cp := os.Getenv("ZOOKEEPER_CLASSPATH"); cp != "" {
		return java, cp, nil
	}
	if _, err := os.Stat(debianJar); err != nil {
		return "", "", fmt.Errorf("zkserver: no ZooKeeper: %s is missing and ZOOKEEPER_CLASSPATH "+
			"is not set; install it with scripts/install-zookeeper.sh (Debian's zookeeper package)", debianJar)
	}
	parts := []string{debianConfDir, debianJar}
	for _, jar := range []string{debianSLF4J, debianLog4j} {
		if _, err := os.Stat(jar); err == nil {
			parts = append(parts, jar)
		}
	}
	return java, strings.Join(parts, string(os.PathListSeparator)), nil
}

// Cluster is a set of running ZooKeeper servers ("members", indexed from 0).
// Its methods are safe for concurrent use.
type Cluster struct {
	cfg       Config
	java      string
	classpath string
	dir       string
	removeDir bool       // dir was made by StartCluster, so Close removes it
	logMu     sync.Mutex // serializes the members' writes to cfg.Log

	members []*member // fixed once StartCluster returns

	mu     sync.Mutex // guards closed and every member's proc, logStart, served and session limits
	closed bool
}

type member struct {
	index                                int
	dir                                  string
	clientPort, quorumPort, electionPort int
	logStart                             int64    // size of zk.log when proc started; older lines are not its own
	served                               bool     // proc has served since it started
	proc                                 *process // nil until started and after Kill or Stop
	minSession, maxSession               time.Duration
}

func (m *member) addr() string       { return fmt.Sprintf("127.0.0.1:%d", m.clientPort) }
func (m *member) logPath() string    { return filepath.Join(m.dir, "zk.log") }
func (m *member) dataDir() string    { return filepath.Join(m.dir, "data") }
func (m *member) configPath() string { return filepath.Join(m.dir, "zoo.cfg") }

// errPortTaken marks a start that failed because another process bound one
// of the member's ports between our probe and the server's bind.
var errPortTaken = errors.New("zkserver: port already in use")

// StartCluster starts cfg.Servers members and waits until all of them serve
// (for an ensemble: a quorum has formed). ctx bounds the wait only; the
// servers run until Close. When a port turns out to be taken, it retries
// with fresh ports, up to 3 times. On error nothing is left running, and the
// error includes the end of the failing member's log.
func StartCluster(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	java, classpath, err := locate()
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, java: java, classpath: classpath, dir: cfg.Dir}
	if c.dir == "" {
		if c.dir, err = makeTempDir(); err != nil {
			return nil, err
		}
		c.removeDir = true
	}
	for attempt := 1; ; attempt++ {
		err = c.startAll(ctx)
		if err == nil {
			return c, nil
		}
		c.killAll()
		if !errors.Is(err, errPortTaken) || attempt == maxStartAttempts || ctx.Err() != nil {
			break
		}
	}
	if c.removeDir {
		err = errors.Join(err, os.RemoveAll(c.dir))
	}
	return nil, err
}

// makeTempDir prefers tmpfs: ZooKeeper fsyncs every write, which on a shared
// disk makes latencies measure the disk instead of the server.
func makeTempDir() (string, error) {
	if dir, err := os.MkdirTemp("/dev/shm", "zkserver-"); err == nil {
		return dir, nil
	}
	dir, err := os.MkdirTemp("", "zkserver-")
	if err != nil {
		return "", fmt.Errorf("zkserver: %w", err)
	}
	return dir, nil
}

// startAll picks fresh ports, writes every member's config and starts them.
func (c *Cluster) startAll(ctx context.Context) error {
	n := c.cfg.Servers
	ports, err := freePorts(3 * n)
	if err != nil {
		return err
	}
	c.members = make([]*member, n)
	for i := range c.members {
		c.members[i] = &member{
			index:        i,
			dir:          filepath.Join(c.dir, fmt.Sprintf("member-%d", i)),
			clientPort:   ports[3*i],
			quorumPort:   ports[3*i+1],
			electionPort: ports[3*i+2],
			minSession:   c.cfg.MinSessionTimeout,
			maxSession:   c.cfg.MaxSessionTimeout,
		}
	}
	for _, m := range c.members {
		if err := c.writeConfig(m); err != nil {
			return err
		}
	}
	if err := c.seed(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	for _, m := range c.members {
		if err = c.launch(m); err != nil {
			break
		}
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.waitServing(ctx, c.members)
}

func (c *Cluster) writeConfig(m *member) error {
	if err := os.MkdirAll(m.dataDir(), 0o755); err != nil {
		return fmt.Errorf("zkserver: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "tickTime=%d\n", c.cfg.TickTime.Milliseconds())
	fmt.Fprintf(&b, "dataDir=%s\n", m.dataDir())
	fmt.Fprintf(&b, "clientPort=%d\n", m.clientPort)
	b.WriteString("clientPortAddress=127.0.0.1\n")
	b.WriteString("admin.enableServer=false\n") // its Jetty would take port 8080
	b.WriteString("4lw.commands.whitelist=*\n")
	fmt.Fprintf(&b, "minSessionTimeout=%d\n", m.minSession.Milliseconds())
	fmt.Fprintf(&b, "maxSessionTimeout=%d\n", m.maxSession.Milliseconds())
	b.WriteString("maxClientCnxns=0\n") // default 60 per IP, and every client is 127.0.0.1
	if len(c.members) > 1 {
		// In ticks, as zk.sh has them, but never so few that a short tick
		// makes a slow JVM on a loaded machine miss them and force a new
		// election: the time followers get to join the leader, and to answer it.
		fmt.Fprintf(&b, "initLimit=%d\n", c.ticks(10, 20*time.Second))
		fmt.Fprintf(&b, "syncLimit=%d\n", c.ticks(5, 10*time.Second))
		for _, o := range c.members {
			fmt.Fprintf(&b, "server.%d=127.0.0.1:%d:%d\n", o.index+1, o.quorumPort, o.electionPort)
		}
		myid := fmt.Sprintf("%d\n", m.index+1)
		if err := os.WriteFile(filepath.Join(m.dataDir(), "myid"), []byte(myid), 0o644); err != nil {
			return fmt.Errorf("zkserver: %w", err)
		}
	}
	if err := os.WriteFile(m.configPath(), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("zkserver: %w", err)
	}
	return nil
}

// ticks returns n, or more if n ticks are shorter than at least.
func (c *Cluster) ticks(n int, atLeast time.Duration) int {
	return max(n, int((atLeast+c.cfg.TickTime-1)/c.cfg.TickTime))
}

// launch starts m's server process. The caller holds c.mu.
func (c *Cluster) launch(m *member) error {
	logFile, err := os.OpenFile(m.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("zkserver: %w", err)
	}
	if m.logStart, err = logFile.Seek(0, io.SeekEnd); err != nil {
		logFile.Close()
		return fmt.Errorf("zkserver: %w", err)
	}
	args := append([]string{}, c.cfg.JavaOpts...)
	args = append(args,
		"-cp", c.classpath,
		"-Dzookeeper.root.logger=INFO,CONSOLE",
		"-Dzookeeper.log.dir="+m.dir,
		// Leader election backs off up to 60s between rounds by default; on
		// a loaded machine one slow round after a leader's death can then
		// outlast a test. 2s keeps elections quick and is still far above
		// the time a round takes on loopback.
		"-Dzookeeper.fastleader.maxNotificationInterval=2000",
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", m.configPath())
	cmd := exec.Command(c.java, args...)
	cmd.Dir = m.dir
	cmd.Stdout = logFile
	if c.cfg.Log != nil {
		cmd.Stdout = io.MultiWriter(logFile, &prefixWriter{
			mu: &c.logMu, w: c.cfg.Log, prefix: fmt.Sprintf("zk%d | ", m.index),
		})
	}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = serverProcAttr()
	p, err := startProcess(cmd, logFile)
	if err != nil {
		return fmt.Errorf("zkserver: start member %d: %w", m.index, err)
	}
	m.proc = p
	m.served = false
	return nil
}

// waitServing polls until every member in ms serves, one of them exits, or
// the start timeout or ctx ends.
func (c *Cluster) waitServing(ctx context.Context, ms []*member) error {
	timeout := standaloneStartTimeout
	if len(c.members) > 1 {
		timeout = ensembleStartTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pending := append([]*member{}, ms...)
	err := poll(ctx, func() (bool, error) {
		var still []*member
		for _, m := range pending {
			if err := c.startFailure(m); err != nil {
				return false, err
			}
			if serving(ctx, m.addr()) {
				c.markServed(m)
			} else {
				still = append(still, m)
			}
		}
		pending = still
		return len(pending) == 0, nil
	})
	if err != nil && ctx.Err() != nil && len(pending) > 0 {
		m := pending[0]
		return fmt.Errorf("zkserver: member %d (%s) not serving (waited up to %v): %w\n%s",
			m.index, m.addr(), timeout, err, c.logTail(m, 30))
	}
	return err
}

// startFailure returns an error when m can no longer come up: its process
// has exited, or, before it first served, its log shows a port bind failure
// (wrapping errPortTaken). Later bind failures are the server's to handle: a
// member that fails to bind its quorum port on becoming leader goes back to
// electing.
func (c *Cluster) startFailure(m *member) error {
	c.mu.Lock()
	p, served, logStart := m.proc, m.served, m.logStart
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("zkserver: member %d was stopped while starting", m.index)
	}
	switch {
	case !served && strings.Contains(readFrom(m.logPath(), logStart), "Address already in use"):
		return fmt.Errorf("%w: member %d (ports %d, %d, %d)\n%s", errPortTaken,
			m.index, m.clientPort, m.quorumPort, m.electionPort, c.logTail(m, 30))
	case !p.running():
		return fmt.Errorf("zkserver: member %d exited while starting (%v)\n%s", m.index, p.err, c.logTail(m, 30))
	}
	return nil
}

func (c *Cluster) markServed(m *member) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m.served = true
}

// WaitServing waits until every running member serves client requests (for
// an ensemble: has joined a quorum). It gives up after 60s (30s standalone)
// or when ctx ends, and fails at once if a member exits.
func (c *Cluster) WaitServing(ctx context.Context) error {
	return c.waitServing(ctx, c.running())
}

// Close stops every member (SIGTERM, then SIGKILL after 5s), waits for each
// to exit and removes the directory StartCluster made. Later calls return nil.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()

	errs := make([]error, len(c.members))
	var wg sync.WaitGroup
	for i, m := range c.members {
		if p := c.takeProc(m); p != nil {
			wg.Go(func() { errs[i] = p.stop(stopGrace) })
		}
	}
	wg.Wait()
	if c.removeDir {
		errs = append(errs, os.RemoveAll(c.dir))
	}
	return errors.Join(errs...)
}

// killAll kills every member after a failed start.
func (c *Cluster) killAll() {
	for _, m := range c.members {
		if p := c.takeProc(m); p != nil {
			p.kill()
		}
	}
}

// ConnectString returns the members' client addresses joined by commas, as
// ZooKeeper clients take them.
func (c *Cluster) ConnectString() string { return strings.Join(c.Addrs(), ",") }

// Addrs returns every member's client address ("127.0.0.1:port"), stopped
// members included: a member keeps its ports across Stop and Start.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.members))
	for i, m := range c.members {
		addrs[i] = m.addr()
	}
	return addrs
}

// Addr returns member i's client address. It panics if i is out of range.
func (c *Cluster) Addr(i int) string { return c.members[i].addr() }

// Len returns the number of members, running or not.
func (c *Cluster) Len() int { return len(c.members) }

// Dir returns the directory that holds the members' data dirs and logs.
func (c *Cluster) Dir() string { return c.dir }

// Kill sends SIGKILL to member i and waits for it to exit: a crash, with no
// chance to close sessions or sockets cleanly.
func (c *Cluster) Kill(i int) error {
	m, err := c.member(i)
	if err != nil {
		return err
	}
	p := c.takeProc(m)
	if p == nil {
		return fmt.Errorf("zkserver: member %d is not running", i)
	}
	return p.kill()
}

// Stop stops member i gracefully (SIGTERM, then SIGKILL after 5s) and waits
// for it to exit.
func (c *Cluster) Stop(i int) error {
	m, err := c.member(i)
	if err != nil {
		return err
	}
	p := c.takeProc(m)
	if p == nil {
		return fmt.Errorf("zkserver: member %d is not running", i)
	}
	return p.stop(stopGrace)
}

// Start restarts member i after Kill or Stop, on the same ports and data dir,
// so clients reconnect to the same address and the member rejoins its
// ensemble with its data. It waits until the member serves. An ensemble
// member serves only once a quorum is up: to restart several members, call
// Start for each concurrently. If the wait fails the member is left running
// (it may still join later); Kill it if that matters. A port taken meanwhile
// is an error, not retried.
func (c *Cluster) Start(ctx context.Context, i int) error {
	m, err := c.member(i)
	if err != nil {
		return err
	}
	c.mu.Lock()
	switch {
	case c.closed:
		err = errors.New("zkserver: cluster is closed")
	case m.proc != nil && m.proc.running():
		err = fmt.Errorf("zkserver: member %d is already running", i)
	default:
		err = c.launch(m)
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.waitServing(ctx, []*member{m})
}

// SetSessionLimits changes the session timeouts member i grants, from its
// next Start: a member restarted with a lower maximum, or an ensemble whose
// members are configured differently, grants a reconnecting client less
// than it had.
func (c *Cluster) SetSessionLimits(i int, minTimeout, maxTimeout time.Duration) error {
	m, err := c.member(i)
	if err != nil {
		return err
	}
	if minTimeout > maxTimeout {
		return fmt.Errorf("zkserver: min session timeout %v > max %v", minTimeout, maxTimeout)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m.minSession, m.maxSession = minTimeout, maxTimeout
	return c.writeConfig(m)
}

// LogTail returns the last n lines of member i's log, for failure messages.
func (c *Cluster) LogTail(i, n int) string {
	m, err := c.member(i)
	if err != nil {
		return ""
	}
	return c.logTail(m, n)
}

func (c *Cluster) logTail(m *member, n int) string {
	const maxRead = 1 << 20 // the tail of a big log is all we need
	text := readFrom(m.logPath(), -maxRead)
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// readFrom returns the file's contents from offset off on, or its last -off
// bytes when off is negative; "" when it cannot be read.
func readFrom(path string, off int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	whence := io.SeekStart
	if off < 0 {
		if fi, err := f.Stat(); err == nil && fi.Size() < -off {
			off = 0
		} else {
			whence = io.SeekEnd
		}
	}
	if _, err := f.Seek(off, whence); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

func (c *Cluster) member(i int) (*member, error) {
	if i < 0 || i >= len(c.members) {
		return nil, fmt.Errorf("zkserver: no member %d (cluster has %d)", i, len(c.members))
	}
	return c.members[i], nil
}

// takeProc detaches m's process so that exactly one caller stops it.
func (c *Cluster) takeProc(m *member) *process {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := m.proc
	m.proc = nil
	return p
}

// running reports the members whose process is alive.
func (c *Cluster) running() []*member {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ms []*member
	for _, m := range c.members {
		if m.proc != nil && m.proc.running() {
			ms = append(ms, m)
		}
	}
	return ms
}
