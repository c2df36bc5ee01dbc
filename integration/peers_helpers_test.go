package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// Helpers of the tests with real peers (peers_test.go): Curator's and
// kazoo's contenders (testdata/peers), run as processes of their own, and
// go-zookeeper's zk.Lock and our own locks, run here, all log their grants
// with CLOCK_MONOTONIC times into one record, which checkGrants
// (peers_check_test.go) judges.

// requirePeer skips the test when the peer ("curator" or "kazoo") is not
// installed, or fails it where ZooKeeper itself is required (make test, CI):
// there a missing peer is a failure, not a quiet skip.
func requirePeer(t *testing.T, peer string) {
	t.Helper()
	sharedServer(t) // skips in -short, as every test with a real server does
	zktest.RequirePeer(t, peer)
}

// javaBuild compiles Contender.java once per test binary, into a directory
// TestMain removes.
var javaBuild struct {
	once sync.Once
	dir  string
	err  error
}

func curatorClasspath(t *testing.T) string {
	t.Helper()
	jars := make([]string, len(zktest.CuratorJars))
	for i, jar := range zktest.CuratorJars {
		jars[i] = filepath.Join(zktest.JavaLibs, jar)
	}
	cp := strings.Join(jars, ":")
	javaBuild.once.Do(func() {
		src, err := filepath.Abs("testdata/peers/Contender.java")
		if err != nil {
			javaBuild.err = err
			return
		}
		if javaBuild.dir, javaBuild.err = os.MkdirTemp("", "zkrwlock-peers-"); javaBuild.err != nil {
			return
		}
		out, err := exec.Command("javac", "-nowarn", "-d", javaBuild.dir, "-cp", cp, src).CombinedOutput()
		if err != nil {
			javaBuild.err = fmt.Errorf("javac Contender.java: %v\n%s", err, out)
		}
	})
	require.NoError(t, javaBuild.err)
	return javaBuild.dir + ":" + cp
}

func removeJavaBuild() {
	if javaBuild.dir != "" {
		os.RemoveAll(javaBuild.dir)
	}
}

// grant is one hold of the lock by one contender, as it logged it.
type grant struct {
	who  string
	mode rwlock.Mode
	node string // the lock node's name
	seq  int32
	acq  int64 // CLOCK_MONOTONIC ns after the acquire returned
	rel  int64 // just before the release was called; 0 while held
}

// record collects the grants of every contender of one run, from any
// goroutine.
type record struct {
	mu     sync.Mutex
	grants []grant
	modes  map[string]rwlock.Mode // contender -> the mode its grants have
	bad    []string               // lines that made no sense
}

func newRecord() *record { return &record{modes: map[string]rwlock.Mode{}} }

func (r *record) contender(who string, m rwlock.Mode) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.modes[who] = m
}

func (r *record) acquired(who, node string, at int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.modes[who]
	seq, okSeq := appendedSeq(node)
	if !ok || !okSeq {
		r.bad = append(r.bad, fmt.Sprintf("acq %s %s: unknown contender or node", who, node))
		return
	}
	r.grants = append(r.grants, grant{who: who, mode: m, node: node, seq: seq, acq: at})
}

func (r *record) releasing(who, node string, at int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.grants) - 1; i >= 0; i-- {
		if g := &r.grants[i]; g.who == who && g.node == node && g.rel == 0 {
			g.rel = at
			return
		}
	}
	r.bad = append(r.bad, fmt.Sprintf("rel %s %s without acq", who, node))
}

// snapshot returns the grants so far, and the lines that made no sense.
func (r *record) snapshot() ([]grant, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]grant(nil), r.grants...), append([]string(nil), r.bad...)
}

// appendedSeq reads the number ZooKeeper appended to a node's name (our
// runs never reach negative ones).
func appendedSeq(node string) (int32, bool) {
	if len(node) < 10 {
		return 0, false
	}
	n, err := strconv.ParseInt(node[len(node)-10:], 10, 32)
	return int32(n), err == nil && n >= 0
}

// peerProc is one contender process: Contender.java's JVM or contender.py.
type peerProc struct {
	name   string
	specs  []peerSpec
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // every line but the events, which go to the record
	stderr *zktest.SyncBuffer
	exited chan struct{} // closed once stdout is drained and the process reaped
	err    error         // its exit; read after exited
}

// peerSpec is one contender of a peer process.
type peerSpec struct {
	name  string
	kind  string // Contender.java's or contender.py's KIND
	count int    // 0: hold until killed
}

// startCurator starts a JVM of Curator contenders on path.
func startCurator(t *testing.T, rec *record, servers, path string, session, hold time.Duration, specs ...peerSpec) *peerProc {
	t.Helper()
	args := []string{"-Xss512k", "-XX:TieredStopAtLevel=1", "-cp", curatorClasspath(t), "Contender"}
	return startPeer(t, rec, "curator", "java", args, servers, path, session, hold, specs)
}

// startKazoo starts a Python process of kazoo contenders on path.
func startKazoo(t *testing.T, rec *record, servers, path string, session, hold time.Duration, specs ...peerSpec) *peerProc {
	t.Helper()
	src, err := filepath.Abs("testdata/peers/contender.py")
	require.NoError(t, err)
	return startPeer(t, rec, "kazoo", zktest.Python, []string{"-u", src}, servers, path, session, hold, specs)
}

var peerModes = map[string]rwlock.Mode{
	"rwread": rwlock.Read, "rwwrite": rwlock.Write, "mutex": rwlock.Write,
	"read": rwlock.Read, "write": rwlock.Write, "lock": rwlock.Write,
	"read-native": rwlock.Read, "write-native": rwlock.Write, "lock-native": rwlock.Write,
}

// startPeer starts the process and waits for its "ready". Cleanup kills it
// (SIGKILL, by its pid) unless it has exited, and so does the end of this
// thread (Pdeathsig), which the test keeps until then.
func startPeer(t *testing.T, rec *record, name, prog string, args []string, servers, path string,
	session, hold time.Duration, specs []peerSpec) *peerProc {
	t.Helper()
	args = append(args, servers, path, strconv.FormatInt(session.Milliseconds(), 10), strconv.FormatInt(hold.Milliseconds(), 10))
	for _, s := range specs {
		m, ok := peerModes[s.kind]
		require.True(t, ok, s.kind)
		rec.contender(s.name, m)
		args = append(args, fmt.Sprintf("%s:%s:%d", s.name, s.kind, s.count))
	}
	runtime.LockOSThread() // Pdeathsig is per thread
	cmd := exec.Command(prog, args...)
	cmd.SysProcAttr = childAttr()
	p := &peerProc{name: name, specs: specs, cmd: cmd, lines: make(chan string, 256), stderr: &zktest.SyncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p.stdin, err = cmd.StdinPipe()
	require.NoError(t, err)
	if err := cmd.Start(); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			cmd.Process.Kill()
			<-p.exited
		}
		runtime.UnlockOSThread()
		if t.Failed() {
			t.Logf("%s contender's stderr:\n%s", name, p.stderr)
		}
	})
	go func() {
		defer close(p.exited)
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			f := strings.Fields(line)
			if len(f) == 4 && (f[0] == "acq" || f[0] == "rel") {
				at, err := strconv.ParseInt(f[1], 10, 64)
				switch {
				case err != nil:
				case f[0] == "acq":
					rec.acquired(f[2], f[3], at)
					continue
				default:
					rec.releasing(f[2], f[3], at)
					continue
				}
			}
			p.lines <- line
		}
		p.err = cmd.Wait()
	}()
	p.expect(t, 60*time.Second, "ready")
	return p
}

// expect waits for the next line that is not an event to start with
// prefix (an "error" line fails the test), and returns it.
func (p *peerProc) expect(t *testing.T, timeout time.Duration, prefix string) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				<-p.exited
				t.Fatalf("the %s contender exited (%v) before printing %q; stderr:\n%s", p.name, p.err, prefix, p.stderr)
			}
			if strings.HasPrefix(line, "error ") {
				t.Fatalf("the %s contender failed: %s", p.name, line)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-deadline:
			t.Fatalf("the %s contender did not print %q within %v", p.name, prefix, timeout)
		}
	}
}

// start lets the contenders go.
func (p *peerProc) start(t *testing.T) {
	t.Helper()
	_, err := io.WriteString(p.stdin, "go\n")
	require.NoError(t, err)
}

// letGo tells its holders (COUNT 0) to release.
func (p *peerProc) letGo(t *testing.T) {
	t.Helper()
	_, err := io.WriteString(p.stdin, "release\n")
	require.NoError(t, err)
}

// finish waits for every contender's "done" and for the process to exit 0.
func (p *peerProc) finish(t *testing.T, timeout time.Duration) {
	t.Helper()
	for range p.specs {
		p.expect(t, timeout, "done ")
	}
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("the %s contender did not exit within %v", p.name, timeout)
	}
	require.NoError(t, p.err, "%s contender; stderr:\n%s", p.name, p.stderr)
}

// kill kills the process with SIGKILL and waits until it is reaped.
func (p *peerProc) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL))
	for range p.lines { // drains stdout; closed once it is reaped
	}
	<-p.exited
}

// ours runs count acquire/hold/release cycles of one of our locks.
func ours(ctx context.Context, rec *record, who string, l *rwlock.RWLock, mode rwlock.Mode, count int, hold time.Duration) error {
	rec.contender(who, mode)
	for range count {
		var g *rwlock.Grant
		var err error
		if mode == rwlock.Write {
			g, err = l.Lock(ctx)
		} else {
			g, err = l.RLock(ctx)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", who, err)
		}
		node := nodeName(g.Node())
		rec.acquired(who, node, monotonic())
		if err := pause(ctx, hold); err != nil {
			g.Release(context.WithoutCancel(ctx))
			return err
		}
		if err := g.Err(); err != nil {
			return fmt.Errorf("%s: lost %s while holding it: %w", who, node, err)
		}
		rec.releasing(who, node, monotonic())
		if err := g.Release(ctx); err != nil {
			return fmt.Errorf("%s: %w", who, err)
		}
		if err := pause(ctx, jitter(hold)); err != nil {
			return err
		}
	}
	return nil
}

// zkLock runs count acquire/hold/release cycles of go-zookeeper's zk.Lock
// on its own connection. zk.Lock has no context: it waits until its
// connection is closed, which the test's cleanup does.
func zkLock(ctx context.Context, rec *record, who string, conn *zk.Conn, path string, count int, hold time.Duration) error {
	rec.contender(who, rwlock.Write)
	l := zk.NewLock(conn, path, zk.WorldACL(zk.PermAll))
	for range count {
		if err := l.Lock(); err != nil {
			return fmt.Errorf("%s: %w", who, err)
		}
		// zk.Lock keeps its node's path to itself.
		node := nodeName(reflect.ValueOf(l).Elem().FieldByName("lockPath").String())
		rec.acquired(who, node, monotonic())
		err := pause(ctx, hold)
		rec.releasing(who, node, monotonic())
		if uerr := l.Unlock(); uerr != nil {
			return fmt.Errorf("%s: unlock: %w", who, uerr)
		}
		if err == nil {
			err = pause(ctx, jitter(hold))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// goAll runs each fn on a goroutine of its own; wait waits for them all
// and fails the test at the first error, or when they take longer than
// timeout. Goroutines left running by a failure end with the test's
// context or, for zk.Lock's, with their connections, which the test's
// cleanup closes.
func goAll(fns ...func() error) (wait func(t *testing.T, timeout time.Duration)) {
	errs := make(chan error, len(fns))
	for _, fn := range fns {
		go func() { errs <- fn() }()
	}
	return func(t *testing.T, timeout time.Duration) {
		t.Helper()
		deadline := time.After(timeout)
		for range fns {
			select {
			case err := <-errs:
				require.NoError(t, err)
			case <-deadline:
				t.Fatalf("contenders still running after %v", timeout)
			}
		}
	}
}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// jitter is a pause between cycles, up to d, so that contenders interleave
// differently each round.
func jitter(d time.Duration) time.Duration {
	return time.Duration(monotonic() % int64(d+1))
}
