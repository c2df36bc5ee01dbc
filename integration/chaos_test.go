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
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/faultproxy"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

var (
	chaosDuration = flag.Duration("chaos.duration", 75*time.Second, "how long TestChaos makes faults (make chaos: MINUTES)")
	chaosSeed     = flag.Uint64("chaos.seed", 0, "TestChaos's seed (0: from the clock; printed) (make chaos: SEED)")
	chaosTimeouts = flag.String("chaos.timeouts", "4s,10s", "the session timeouts T the clients ask for, comma-separated; each client picks one (make chaos: T)")
	chaosClients  = flag.Int("chaos.clients", 8, "how many client processes run at once (make chaos: CLIENTS)")
	chaosRace     = flag.Bool("chaos.race", false, "build the client processes with the race detector (make chaos: RACE=1)")
	chaosKeep     = flag.String("chaos.keep", filepath.Join(os.TempDir(), "zkrwlock-chaos"),
		"where every run's figures are added (runs.jsonl) and a failed run's history is kept (make chaos: KEEP)")
)

// TestChaos is a randomized fault run against a 3-node ensemble: client
// processes (chaos_client_test.go), each connected through a proxy of its
// own per member, take two locks, alone and together (LockAll), some under
// hold limits, some as coalesced readers, while a nemesis kills the leader
// or a follower (kill -9) and restarts it, restarts a member with a lower
// maxSessionTimeout (so that a reconnection is granted less than the
// session had), partitions a client for less or more than its session
// timeout, stops a client (SIGSTOP) for less or more than it, and kills a
// holder (kill -9, then starts another client). The checker
// (chaos_check_test.go) then flags, lock by lock, any step a holder took
// after another holder's conflicting grant was returned or past its hold
// limit, and the nodes left behind once every client has stopped; it
// counts losses by cause, those with no fault near them, and the longest
// stall outside faults.
//
// The run itself is built without the race detector; with -chaos.race its
// clients are, and a race report of ours fails the run
// (chaos_race_test.go). Every run adds its figures to runs.jsonl under
// -chaos.keep, and a run that fails keeps its history there too
// (chaos_history_test.go).
func TestChaos(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-chaos.seed to replay the nemesis's choices; timing still varies)", seed)
	timeouts, err := parseChaosTimeouts(*chaosTimeouts)
	require.NoError(t, err)
	require.Positive(t, *chaosClients, "-chaos.clients")
	// Found at the end, a -chaos.keep that is not a directory would lose a
	// long run's history.
	require.NoError(t, os.MkdirAll(*chaosKeep, 0o755), "-chaos.keep names a directory")
	rng := rand.New(rand.NewPCG(seed, 17))
	client := os.Args[0]
	if *chaosRace {
		client = buildRaceClient(t)
	}
	cl := zkserver.Start(t, zkserver.Config{Servers: 3, TickTime: faultTick, MinSessionTimeout: time.Second,
		MaxSessionTimeout: max(10*time.Second, slices.Max(timeouts))})
	path := zktest.LockPath(t, "/chaos")
	r := &chaosRun{t: t, cl: cl, rng: rng, seed: seed, timeouts: timeouts, binary: client, start: time.Now(),
		paths: [2]string{path, path + "-b"}, clients: map[int]*chaosProc{}, holding: map[chaosHolder]int{}, until: map[chaosHolder]int64{}}
	t.Cleanup(r.keep) // before the servers stop (cleanups run last first), after the clients have
	for range *chaosClients {
		r.startClient()
	}
	r.nemesis(*chaosDuration)
	r.stopAll()
	r.report()
}

// parseChaosTimeouts reads -chaos.timeouts. Each must be at least eight
// ticks of the servers, where the lease clock's ensemble margins hold
// (internal/zkclient/lease.go): below that a late step is no violation of
// a promise the lock makes.
func parseChaosTimeouts(s string) ([]time.Duration, error) {
	var ts []time.Duration
	for _, f := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("-chaos.timeouts %q: %w", s, err)
		}
		if d < 8*faultTick {
			return nil, fmt.Errorf("-chaos.timeouts %q: %v is under eight ticks (%v), where the lock promises less", s, d, 8*faultTick)
		}
		ts = append(ts, d)
	}
	return ts, nil
}

// buildRaceClient builds this package's tests with the race detector, for
// the client processes, and returns the binary's path.
func buildRaceClient(t *testing.T) string {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "chaos-client.test")
	start := time.Now()
	out, err := exec.Command(goTool, "test", "-c", "-race", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "building the clients with -race: %s", out)
	t.Logf("clients built with -race in %v", time.Since(start).Round(time.Second))
	return bin
}

type chaosRun struct {
	t        *testing.T
	cl       *zkserver.Cluster
	rng      *rand.Rand
	seed     uint64
	timeouts []time.Duration
	binary   string // the clients' executable
	paths    [2]string
	start    time.Time

	mu      sync.Mutex
	clients map[int]*chaosProc // running
	procs   []*chaosProc       // every client started
	next    int
	events  []chaosEvent
	faults  []chaosFault
	errors  []string              // what clients printed as errors, and crashes
	holding map[chaosHolder]int   // how many grants each holder holds, as its events tell
	until   map[chaosHolder]int64 // when each holder means to let go of its last grant
	orphans []string              // nodes left after every client stopped
	summary *chaosSummary         // the figures, once reported
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
	p := &chaosProc{id: id, timeout: r.timeouts[r.rng.IntN(len(r.timeouts))], stderr: &bytes.Buffer{},
		done: make(chan struct{}), ready: make(chan struct{})}
	var addrs []string
	for i := range r.cl.Len() {
		px := proxied(t, r.cl.Addr(i))
		p.proxies = append(p.proxies, px)
		addrs = append(addrs, px.Addr())
	}
	p.cmd = exec.Command(r.binary, "-test.run=^TestHelperChaosClient$", "-test.timeout=0")
	p.cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", chaosEnv, id), chaosEnvServers+"="+strings.Join(addrs, ","),
		chaosEnvPaths+"="+strings.Join(r.paths[:], ","), chaosEnvTimeout+"="+p.timeout.String(),
		fmt.Sprintf("%s=%d", chaosEnvSeed, r.seed),
		// go-zookeeper's own race (chaos_race_test.go) must not stop a client.
		"GORACE=halt_on_error=0")
	p.cmd.SysProcAttr = childAttr()
	p.cmd.Stderr = p.stderr
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	p.stdin, err = p.cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
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
			h := chaosHolder{e.Client, e.Worker}
			switch e.Kind {
			case "granted":
				r.holding[h]++
				r.until[h] = e.Until
			case "lost", "released":
				r.holding[h]--
			case "waiting":
				delete(r.holding, h)
			}
			r.mu.Unlock()
		case strings.HasPrefix(line, "error "):
			r.note(line[len("error "):])
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

// pick returns a running client; if holder, one that holds a grant, if
// any does, preferring one that means to hold it for another second or
// more, so that a fault can outlast the holder's use of its grant.
func (r *chaosRun) pick(holder bool) *chaosProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []int
	for id := range r.clients {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	if holder {
		holds, long := map[int]bool{}, map[int]bool{}
		soon := time.Now().Add(time.Second).UnixNano()
		for h, n := range r.holding {
			holds[h.client] = holds[h.client] || n > 0
			long[h.client] = long[h.client] || n > 0 && r.until[h] > soon
		}
		ids = slices.DeleteFunc(ids, func(id int) bool { return !holds[id] })
		if longer := slices.DeleteFunc(slices.Clone(ids), func(id int) bool { return !long[id] }); len(longer) > 0 {
			ids = longer
		}
	}
	if len(ids) == 0 {
		return nil
	}
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

// stopAll stops every client (each releases what it holds and closes its
// connection) and waits for both lock directories to empty: a killed
// holder's session expires meanwhile.
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
			if err := p.cmd.Wait(); err != nil && !raced(err) {
				r.note(fmt.Sprintf("c%d exited: %v: %s", p.id, err, p.stderr))
			}
		case <-time.After(time.Minute):
			r.note(fmt.Sprintf("c%d did not stop within a minute", p.id))
			p.cmd.Process.Kill()
			<-p.done
			p.cmd.Wait()
		}
	}
	watcher := connect(t, r.cl.ConnectString(), 0)
	var left []string
	for _, path := range append(r.paths[:], electionPath(r.paths[0]), chaosPermitsPath(r.paths[0])) {
		left = append(left, nodesLeftAfter(watcher.conn, path, slices.Max(r.timeouts)+10*time.Second)...)
	}
	r.mu.Lock()
	r.orphans = left
	r.mu.Unlock()
}

// raced reports whether a client's exit status is the race detector's:
// it exits 66 after reporting a race, which raceReports judges.
func raced(err error) bool {
	var ee *exec.ExitError
	return *chaosRace && errors.As(err, &ee) && ee.ExitCode() == 66
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

// report prints the figures and fails on a violation, a node left
// behind, a race of ours, or a run without grants.
func (r *chaosRun) report() {
	t := r.t
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.summarize()
	var b strings.Builder
	fmt.Fprintf(&b, "chaos: seed %d, %v of faults, T %v, %d clients at once (%d started), race detector %v\n",
		s.Seed, *chaosDuration, *chaosTimeouts, *chaosClients, s.Started, s.Race)
	fmt.Fprintf(&b, "  faults:      %d: %s\n", len(r.faults), sortedCounts(s.Faults))
	fmt.Fprintf(&b, "  grants:      %d (%d read, %d write; %d in sets, %d under hold limits, %d coalesced, %d of them joined)\n",
		s.Grants, s.Reads, s.Writes, s.Sets, s.Limited, s.Coalesced, s.Joined)
	fmt.Fprintf(&b, "               %d of the bounded lock c (capacity %d), %d steps, %d nested\n", s.Permits, chaosCapacity, s.Steps, s.Nested)
	fmt.Fprintf(&b, "  elections:   %d terms, %d double leaders\n", s.Terms, len(s.DoubleLeaders))
	fmt.Fprintf(&b, "  violations:  %d late steps or permits past the capacity, %d orphaned nodes (%d steps asked across a pause, not judged)\n",
		len(s.Violations), len(s.Orphans), s.Ambiguous)
	fmt.Fprintf(&b, "  races:       %d of ours, %d of go-zookeeper's own\n", s.OurRaces, s.ZKRaces)
	fmt.Fprintf(&b, "  losses:      %s; %d with no fault near\n", sortedCounts(s.Lost), len(s.FalseLosses))
	fmt.Fprintf(&b, "  stall:       longest %v outside faults\n", s.LongestStall.Round(time.Millisecond))
	t.Log(b.String())
	for _, v := range firstOf(s.Violations) {
		t.Errorf("violation: %s", v)
	}
	if n := len(s.Violations) - chaosShown; n > 0 {
		t.Errorf("and %d violations more (all of them in the history)", n)
	}
	for _, f := range firstOf(s.FalseLosses) {
		t.Logf("loss with no fault near: %s", f)
	}
	for _, o := range firstOf(s.OtherLosses) {
		t.Logf("loss of another cause: %s", o)
	}
	for _, e := range r.errors {
		t.Logf("client: %s", e)
	}
	var ours []string
	for _, rr := range s.races {
		if rr.Ours {
			ours = append(ours, fmt.Sprintf("c%d:\n%s", rr.Client, rr.Text))
		}
	}
	for _, rr := range firstOf(ours) {
		t.Errorf("a data race of ours in %s", rr)
	}
	if n := len(ours) - chaosShown; n > 0 {
		t.Errorf("and %d data races of ours more (all of them in the history)", n)
	}
	if len(s.Orphans) > 0 {
		t.Errorf("nodes left after every client stopped: %v", s.Orphans)
	}
	if s.Grants == 0 {
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
