// Command gozk runs the comparison's workloads with go-zookeeper's zk.Lock
// (github.com/go-zookeeper/zk, the version in this module's go.mod). zk.Lock
// is a mutex with no read side, so it runs W1, W3 and W6 only; it has no
// timeout either, so W3 waits without one. Definitions: bench/peers/README.md.
//
//	gozk CONNECT_STRING WORKLOAD...
//
// For each workload it prints one JSON line on stdout (impl "gozk"), with
// an "error" key, and exits 1 at the end, if the workload failed. The
// environment variables RWBENCH_OPS, RWBENCH_WARMUP, RWBENCH_SECONDS and
// RWBENCH_WAITERS shrink the workloads for smoke tests; the workload names
// then say so (W1-smoke, W6-5), so that tables never mix them with real runs.
//
// It depends on go-zookeeper only, as a program of its users would.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// The workload constants (bench/peers/README.md).
const (
	sessionTimeout = 10 * time.Second
	connectTimeout = 30 * time.Second
	contenders     = 8                // W3 clients
	watchTimeout   = 30 * time.Second // W6: for the waiters' watches
	mntrTimeout    = 5 * time.Second
	pollEvery      = 10 * time.Millisecond
	watchdog       = 5 * time.Minute // one workload, through a slow proxy included
)

// sizes are a run's parameters: the standard ones unless the environment
// shrinks them.
type sizes struct {
	ops, warmup int           // W1
	duration    time.Duration // W3
	waiters     int           // W6
}

var standard = sizes{ops: 2000, warmup: 100, duration: 5 * time.Second, waiters: 200}

func sizesFromEnv() (sizes, error) {
	s := standard
	for _, v := range []struct {
		name string
		set  func(float64)
	}{
		{"RWBENCH_OPS", func(f float64) { s.ops = int(f) }},
		{"RWBENCH_WARMUP", func(f float64) { s.warmup = int(f) }},
		{"RWBENCH_SECONDS", func(f float64) { s.duration = time.Duration(f * float64(time.Second)) }},
		{"RWBENCH_WAITERS", func(f float64) { s.waiters = int(f) }},
	} {
		if env := os.Getenv(v.name); env != "" {
			f, err := strconv.ParseFloat(env, 64)
			if err != nil || f < 0 {
				return s, fmt.Errorf("%s=%q: want a number", v.name, env)
			}
			v.set(f)
		}
	}
	if s.ops < 1 || s.waiters < 1 || s.duration <= 0 {
		return s, fmt.Errorf("RWBENCH_OPS, RWBENCH_WAITERS and RWBENCH_SECONDS must be positive")
	}
	return s, nil
}

// name is the workload's name in the output: suffixed when the run is
// not the standard one.
func (s sizes) name(w string) string {
	switch w {
	case "W1":
		if s.ops != standard.ops || s.warmup != standard.warmup {
			return w + "-smoke"
		}
	case "W3":
		if s.duration != standard.duration {
			return w + "-smoke"
		}
	case "W6":
		if s.waiters != standard.waiters {
			return fmt.Sprintf("%s-%d", w, s.waiters)
		}
	}
	return w
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: gozk CONNECT_STRING WORKLOAD...  (W1, W3, W6)")
		os.Exit(2)
	}
	sz, err := sizesFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gozk:", err)
		os.Exit(2)
	}
	h := &harness{servers: strings.Split(os.Args[1], ","), sizes: sz}
	failed := false
	for _, w := range os.Args[2:] {
		r := h.run(w)
		fmt.Println(r)
		if r.has("error") {
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

type harness struct {
	servers []string
	sizes   sizes
}

// run runs one workload and returns its record. A workload that outlives
// the watchdog is reported and the process exits: zk.Lock cannot be
// interrupted.
func (h *harness) run(w string) *record {
	r := newRecord(h.sizes.name(w))
	stop := time.AfterFunc(watchdog, func() {
		r.put("error", fmt.Sprintf("watchdog: the run took over %v", watchdog))
		fmt.Println(r)
		os.Exit(3)
	})
	defer stop.Stop()
	var err error
	switch w {
	case "W1":
		err = h.uncontended(r)
	case "W3":
		err = h.contended(r)
	case "W6":
		err = h.drain(r)
	case "W2", "W4", "W5", "W6r":
		err = fmt.Errorf("zk.Lock is a mutex: no read lock for %s", w)
	default:
		err = fmt.Errorf("unknown workload %q", w)
	}
	if err != nil {
		r.put("error", err.Error())
	}
	return r
}

// lockPath returns a fresh lock path, /rwbench/gozk/<workload>-<ms>-<rand>.
func lockPath(workload string) string {
	return fmt.Sprintf("/rwbench/gozk/%s-%d-%d", workload, time.Now().UnixMilli(), rand.Int32N(1<<30))
}

var acl = zk.WorldACL(zk.PermAll)

// ---- sessions ----

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// session is one client: a *zk.Conn and its event channel.
type session struct {
	conn   *zk.Conn
	events <-chan zk.Event
}

// dial opens n sessions at once and waits until each has its session.
// On error the sessions opened are closed.
func (h *harness) dial(n int) ([]session, error) {
	ss := make([]session, 0, n)
	for range n {
		c, ev, err := zk.Connect(h.servers, sessionTimeout, zk.WithLogger(quiet{}), zk.WithLogInfo(false))
		if err != nil {
			closeAll(ss)
			return nil, err
		}
		ss = append(ss, session{c, ev})
	}
	deadline := time.NewTimer(connectTimeout)
	defer deadline.Stop()
	for _, s := range ss {
		for s.conn.State() != zk.StateHasSession {
			select {
			case <-s.events:
			case <-deadline.C:
				closeAll(ss)
				return nil, fmt.Errorf("no session after %v", connectTimeout)
			}
		}
	}
	return ss, nil
}

// closeAll closes every session, so that the server deletes their nodes
// now and not at expiry during the next run, and waits until each
// client's goroutines are done (go-zookeeper then closes the events).
func closeAll(ss []session) {
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(func() {
			s.conn.Close()
			timeout := time.After(connectTimeout)
			for {
				select {
				case _, ok := <-s.events:
					if !ok {
						return
					}
				case <-timeout:
					return
				}
			}
		})
	}
	wg.Wait()
}

// ---- measurement ----

var epoch = time.Now()

// now reads the monotonic clock.
func now() time.Duration { return time.Since(epoch) }

// pct returns the nearest-rank percentile p of ds, in microseconds.
func pct(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return us(s[max(0, min(i, len(s)-1))])
}

func mean(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return us(t) / float64(len(ds))
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// mntr returns an integer mntr statistic summed over the servers. Every
// call costs each server one packet, which the workloads subtract.
func (h *harness) mntr(key string) (int64, error) {
	var sum int64
	for _, addr := range h.servers {
		v, err := mntrOne(addr, key)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

func mntrOne(addr, key string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), mntrTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, fmt.Errorf("mntr %s: %w", addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(mntrTimeout))
	if _, err := io.WriteString(c, "mntr"); err != nil {
		return 0, fmt.Errorf("mntr %s: %w", addr, err)
	}
	reply, err := io.ReadAll(c) // the server closes after its reply
	if err != nil {
		return 0, fmt.Errorf("mntr %s: %w", addr, err)
	}
	for line := range strings.Lines(string(reply)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if ok && k == key {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("mntr %s: no %s", addr, key)
}

// requests puts zk_packets, the packets the servers received between two
// mntr snapshots less the second snapshot's own and other packets that
// were not the workload's, and zk_req_per_acq, those per acquisition.
func (h *harness) requests(r *record, p0, p1, other, acquisitions int64) {
	packets := p1 - p0 - int64(len(h.servers)) - other
	r.put("zk_packets", packets)
	if acquisitions > 0 {
		r.put("zk_req_per_acq", float64(packets)/float64(acquisitions))
	} else {
		r.put("zk_req_per_acq", nil)
	}
}

// holders is the in-process mutual exclusion check: zk.Lock has writers
// only, so any second holder is a violation. It counts over the whole
// process, across a workload's rounds.
type holders struct {
	mu                 sync.Mutex
	active, violations int64
}

func (x *holders) enter() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.active++; x.active > 1 {
		x.violations++
	}
}

func (x *holders) leave() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.active--
}

func (x *holders) count() int64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.violations
}

// ---- output ----

// record is one JSON line, keys in the order put, floats to 3 decimals,
// formatted as Python's json.dumps formats them.
type record struct {
	mu   sync.Mutex
	keys []string
	vals map[string]any
}

func newRecord(workload string) *record {
	r := &record{vals: map[string]any{}}
	r.put("impl", "gozk")
	r.put("workload", workload)
	return r
}

func (r *record) put(k string, v any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := v.(float64); ok {
		v = math.Round(f*1000) / 1000
	}
	if _, ok := r.vals[k]; !ok {
		r.keys = append(r.keys, k)
	}
	r.vals[k] = v
}

func (r *record) has(k string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.vals[k]
	return ok
}

func (r *record) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range r.keys {
		if i > 0 {
			b.WriteString(", ")
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(r.vals[k])
		if err != nil {
			vb = []byte("null")
		}
		b.Write(kb)
		b.WriteString(": ")
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.String()
}
