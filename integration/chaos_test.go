//go:build !race

package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/faultproxy"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

var (
	chaosDuration = flag.Duration("chaos.duration", 75*time.Second, "how long TestChaos makes faults (make chaos: MINUTES)")
	chaosSeed     = flag.Uint64("chaos.seed", 0, "TestChaos's seed (0: from the clock; printed)")
)

// TestChaos is a randomized fault run against a 3-node ensemble: client
// processes (chaos_client_test.go), each connected through a proxy of its
// own per member, take one lock while a nemesis kills the leader or a
// follower (kill -9) and restarts it, restarts a member with a lower
// maxSessionTimeout (so that a reconnection is granted less than the
// session had), partitions a client for less or more than its session
// timeout, stops a client (SIGSTOP) for less or more than it, and kills a
// holder (kill -9, then starts another client). The checker
// (chaos_check_test.go) then flags any step a holder took after another
// client's conflicting grant was returned, and the nodes left behind once
// every client has stopped; it counts losses by cause, those with no fault
// near them, and the longest stall outside faults. It runs without the
// race detector: go-zookeeper races with itself at a reconnection
// (go-zookeeper/zk#35), in the clients as anywhere.
func TestChaos(t *testing.T) {
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-chaos.seed to replay the nemesis's choices; timing still varies)", seed)
	rng := rand.New(rand.NewPCG(seed, 17))
	cl := zkserver.Start(t, zkserver.Config{Servers: 3, TickTime: faultTick, MinSessionTimeout: time.Second, MaxSessionTimeout: 10 * time.Second})
	r := &chaosRun{t: t, cl: cl, rng: rng, seed: seed, path: zktest.LockPath(t, "/chaos"), clients: map[int]*chaosProc{}}
	for range 6 {
		r.startClient()
	}
	r.nemesis(*chaosDuration)
	r.stopAll()
	r.report()
}

// The session timeouts the clients ask for: at least eight ticks, where
// the lease clock's ensemble margins hold (internal/zkclient/lease.go).
var chaosTimeouts = []time.Duration{4 * time.Second, 10 * time.Second}

type chaosRun struct {
	t    *testing.T
	cl   *zkserver.Cluster
	rng  *rand.Rand
	seed uint64
	path string

	mu      sync.Mutex
	clients map[int]*chaosProc // running
	next    int
	events  []chaosEvent
	faults  []chaosFault
	errors  []string     // what clients printed as errors, and crashes
	holders map[int]bool // clients holding a grant, as their events tell
	orphans []string     // nodes left after every client stopped
}

// chaosProc is one client process and its proxies.
type chaosProc struct {
	id      int
	timeout time.Duration
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	proxies []*faultproxy.Proxy
	stderr  *bytes.Buffer
	done    chan struct{} // its stdout is drained
	ready   chan struct{}
}

func (r *chaosRun) startClient() *chaosProc {
	t := r.t
	r.mu.Lock()
	id := r.next
	r.next++
	r.mu.Unlock()
	p := &chaosProc{id: id, timeout: chaosTimeouts[r.rng.IntN(len(chaosTimeouts))], stderr: &bytes.Buffer{},
		done: make(chan struct{}), ready: make(chan struct{})}
	var addrs []string
	for i := range r.cl.Len() {
		px := proxied(t, r.cl.Addr(i))
		p.proxies = append(p.proxies, px)
		addrs = append(addrs, px.Addr())
	}
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestHelperChaosClient$", "-test.timeout=0")
	p.cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", chaosEnv, id), chaosEnvServers+"="+strings.Join(addrs, ","),
		chaosEnvPath+"="+r.path, chaosEnvTimeout+"="+p.timeout.String(), fmt.Sprintf("%s=%d", chaosEnvSeed, r.seed))
	p.cmd.SysProcAttr = childAttr()
	p.cmd.Stderr = p.stderr
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	p.stdin, err = p.cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done; p.cmd.Wait() })
	go r.read(p, stdout)
	select {
	case <-p.ready:
	case <-p.done:
		t.Fatalf("chaos client %d ended before it was ready: %s", id, p.stderr)
	case <-time.After(2 * time.Minute):
		t.Fatalf("chaos client %d not ready after 2m", id)
	}
	r.mu.Lock()
	r.clients[id] = p
	r.mu.Unlock()
	return p
}

// read takes in a client's lines.
func (r *chaosRun) read(p *chaosProc, stdout io.Reader) {
	defer close(p.done)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "ready":
			close(p.ready)
		case strings.HasPrefix(line, "event "):
			var e chaosEvent
			if err := json.Unmarshal([]byte(line[len("event "):]), &e); err != nil {
				r.note(fmt.Sprintf("c%d: bad event %q", p.id, line))
				continue
			}
			r.mu.Lock()
			r.events = append(r.events, e)
			if r.holders == nil {
				r.holders = map[int]bool{}
			}
			r.holders[p.id] = e.Kind == "granted" || (r.holders[p.id] && e.Kind != "lost" && e.Kind != "released")
			r.mu.Unlock()
		case strings.HasPrefix(line, "error "):
			r.note(fmt.Sprintf("c%d: %s", p.id, line[len("error "):]))
		}
	}
}

func (r *chaosRun) note(s string) {
	r.mu.Lock()
	r.errors = append(r.errors, s)
	r.mu.Unlock()
}

func (r *chaosRun) fault(kind string, client int, from time.Time) {
	r.mu.Lock()
	r.faults = append(r.faults, chaosFault{Kind: kind, Client: client, From: from.UnixNano(), To: time.Now().UnixNano()})
	r.mu.Unlock()
	who := "servers"
	if client >= 0 {
		who = fmt.Sprintf("c%d", client)
	}
	r.t.Logf("%s %s (%s) %v", from.Format("15:04:05.000"), kind, who, time.Since(from).Round(time.Millisecond))
}

// pick returns a running client, a holder if holder and one holds.
func (r *chaosRun) pick(holder bool) *chaosProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []int
	for id := range r.clients {
		if !holder || r.holders[id] {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	sort.Ints(ids)
	return r.clients[ids[r.rng.IntN(len(ids))]]
}

// nemesis makes faults for d, one at a time, a few seconds apart.
func (r *chaosRun) nemesis(d time.Duration) {
	t := r.t
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		time.Sleep(time.Duration(1000+r.rng.IntN(3000)) * time.Millisecond) // the pace: clients work between faults
		from := time.Now()
		switch k := r.rng.IntN(8); k {
		case 0, 1: // the leader, or a follower, dies and comes back
			leader, err := r.cl.Leader()
			require.NoError(t, err)
			i, kind := leader, "leader-kill"
			if k == 1 {
				i, kind = (leader+1+r.rng.IntN(2))%3, "follower-kill"
			}
			require.NoError(t, r.cl.Kill(i))
			time.Sleep(time.Duration(500+r.rng.IntN(3000)) * time.Millisecond) // the member stays down
			require.NoError(t, r.cl.Start(t.Context(), i))
			r.fault(kind, -1, from)
		case 2: // a member restarts with other session limits
			i := r.rng.IntN(3)
			maxT := []time.Duration{3 * time.Second, 4 * time.Second, 10 * time.Second}[r.rng.IntN(3)]
			require.NoError(t, r.cl.SetSessionLimits(i, time.Second, maxT))
			require.NoError(t, r.cl.Stop(i))
			require.NoError(t, r.cl.Start(t.Context(), i))
			r.fault(fmt.Sprintf("limits(m%d max %v)", i, maxT), -1, from)
		case 3, 4: // a client is cut off, shorter or longer than its timeout
			p := r.pick(r.rng.IntN(2) == 0)
			if p == nil {
				continue
			}
			long := r.rng.IntN(2) == 0
			for _, px := range p.proxies {
				px.Blackhole()
			}
			time.Sleep(chaosSpan(r.rng, p.timeout, long)) // the partition
			for _, px := range p.proxies {
				heal(px)
			}
			r.fault(map[bool]string{false: "partition-short", true: "partition-long"}[long], p.id, from)
		case 5, 6: // a client's process is stopped
			p := r.pick(r.rng.IntN(2) == 0)
			if p == nil {
				continue
			}
			long := r.rng.IntN(2) == 0
			require.NoError(t, syscall.Kill(p.cmd.Process.Pid, syscall.SIGSTOP))
			time.Sleep(chaosSpan(r.rng, p.timeout, long)) // the pause
			require.NoError(t, syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT))
			r.fault(map[bool]string{false: "stop-short", true: "stop-long"}[long], p.id, from)
		case 7: // a holder dies; another client takes its place
			p := r.pick(true)
			if p == nil {
				continue
			}
			require.NoError(t, p.cmd.Process.Kill())
			<-p.done
			p.cmd.Wait()
			r.mu.Lock()
			delete(r.clients, p.id)
			r.mu.Unlock()
			r.fault("holder-kill", p.id, from)
			r.startClient()
		}
	}
}

// chaosSpan is how long a partition or a stop lasts: well under the
// session timeout, or past it.
func chaosSpan(rng *rand.Rand, timeout time.Duration, long bool) time.Duration {
	if long {
		return timeout + time.Duration(rng.Int64N(int64(timeout)))
	}
	return timeout/10 + time.Duration(rng.Int64N(int64(timeout/4)))
}

// stopAll restores every member's limits, stops every client (each
// releases what it holds and closes its connection) and waits for the
// lock directory to empty: a killed holder's session expires meanwhile.
func (r *chaosRun) stopAll() {
	t := r.t
	r.mu.Lock()
	procs := make([]*chaosProc, 0, len(r.clients))
	for _, p := range r.clients {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	for _, p := range procs {
		p.stdin.Close()
	}
	for _, p := range procs {
		select {
		case <-p.done:
			if err := p.cmd.Wait(); err != nil {
				r.note(fmt.Sprintf("c%d exited: %v: %s", p.id, err, p.stderr))
			}
		case <-time.After(time.Minute):
			r.note(fmt.Sprintf("c%d did not stop within a minute", p.id))
		}
	}
	watcher := connect(t, r.cl.ConnectString(), 0)
	left := nodesLeftAfter(watcher.conn, r.path, chaosTimeouts[len(chaosTimeouts)-1]+10*time.Second)
	r.mu.Lock()
	r.orphans = left
	r.mu.Unlock()
}

// nodesLeftAfter waits, watching the lock directory dir, until it is empty
// or gone, and returns the nodes still in it after timeout: none if it
// emptied in time. A failed listing is tried again 200ms later.
func nodesLeftAfter(conn *zk.Conn, dir string, timeout time.Duration) []string {
	deadline := time.After(timeout)
	var left []string
	for {
		nodes, _, changed, err := conn.ChildrenW(dir)
		var retry <-chan time.Time
		switch {
		case errors.Is(err, zk.ErrNoNode) || err == nil && len(nodes) == 0:
			return nil
		case err != nil:
			retry = time.After(200 * time.Millisecond)
		default:
			left = nodes
		}
		select {
		case <-changed:
		case <-retry:
		case <-deadline:
			return left
		}
	}
}

// report prints the figures and fails on a violation.
func (r *chaosRun) report() {
	t := r.t
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := check(r.events, r.faults, 2*chaosTimeouts[len(chaosTimeouts)-1])
	kinds := map[string]int{}
	for _, f := range r.faults {
		kinds[strings.SplitN(f.Kind, "(", 2)[0]]++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "chaos: seed %d, %v of faults, %d clients\n", r.seed, *chaosDuration, r.next)
	fmt.Fprintf(&b, "  faults:      %d: %s\n", len(r.faults), sortedCounts(kinds))
	fmt.Fprintf(&b, "  grants:      %d (%d read, %d write), %d steps, %d nested\n", rep.grants, rep.reads, rep.writes, rep.steps, rep.nested)
	fmt.Fprintf(&b, "  violations:  %d late steps, %d orphaned nodes (%d steps asked across a pause, not judged)\n",
		len(rep.violations), len(r.orphans), rep.ambiguous)
	fmt.Fprintf(&b, "  losses:      %s; %d with no fault near\n", sortedCounts(rep.lost), len(rep.falseLosses))
	fmt.Fprintf(&b, "  stall:       longest %v outside faults\n", rep.longestStall.Round(time.Millisecond))
	t.Log(b.String())
	for _, v := range rep.violations {
		t.Errorf("violation: %s", v)
	}
	for _, f := range rep.falseLosses {
		t.Logf("loss with no fault near: %s", f)
	}
	for _, e := range r.errors {
		t.Logf("client: %s", e)
	}
	if len(r.orphans) > 0 {
		t.Errorf("nodes left after every client stopped: %v", r.orphans)
	}
	if rep.grants == 0 {
		t.Error("no grant at all")
	}
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
