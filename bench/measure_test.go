package bench

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// epoch anchors now: time.Since reads the monotonic clock.
var epoch = time.Now()

// now is the time since the process started, from the monotonic clock.
func now() time.Duration { return time.Since(epoch) }

// pct returns the nearest-rank percentile p (0 < p <= 100) of ds in
// microseconds, as the peers compute it; 0 for no samples.
func pct(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return us(s[max(0, min(i, len(s)-1))])
}

// mean returns the mean of ds in microseconds; 0 for no samples.
func mean(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	var t float64
	for _, d := range ds {
		t += float64(d)
	}
	return t / float64(len(ds)) / 1e3
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// checker is the peers' in-process mutual exclusion check: counters of
// active readers and writers, updated right after an acquire and right
// before a release. A writer that sees any other holder, or a reader that
// sees a writer, is a violation.
type checker struct {
	readers, writers, violations atomic.Int64
}

func (c *checker) enter(write bool) {
	if write {
		if c.writers.Add(1) > 1 || c.readers.Load() > 0 {
			c.violations.Add(1)
		}
		return
	}
	c.readers.Add(1)
	if c.writers.Load() > 0 {
		c.violations.Add(1)
	}
}

func (c *checker) leave(write bool) {
	if write {
		c.writers.Add(-1)
	} else {
		c.readers.Add(-1)
	}
}

// splitmix64 is the peers' W5 generator (Java's and Python's Mix), so that
// each client draws the same sequence of reads and writes in every harness.
type splitmix64 struct{ x uint64 }

// next returns a float64 in [0, 1).
func (m *splitmix64) next() float64 {
	m.x += 0x9E3779B97F4A7C15
	z := m.x
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	z ^= z >> 31
	return float64(z>>11) * 0x1p-53
}

// countdown is a latch: wait returns once arrive has been called n times.
type countdown struct {
	left atomic.Int64
	done chan struct{}
}

func newCountdown(n int) *countdown {
	c := &countdown{done: make(chan struct{})}
	c.left.Store(int64(n))
	return c
}

func (c *countdown) arrive() {
	if c.left.Add(-1) == 0 {
		close(c.done)
	}
}

// wait reports whether everyone arrived within d.
func (c *countdown) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.done:
		return true
	case <-t.C:
		return false
	}
}

// usage measures what the whole process spends, go-zookeeper's goroutines
// included: heap allocations and CPU time (user + system, all threads; not
// the server's, which is another process).
type usage struct {
	mallocs, bytes uint64
	cpu            time.Duration
}

func startUsage() usage {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{ms.Mallocs, ms.TotalAlloc, cpuTime()}
}

// since returns what was spent since u was taken.
func (u usage) since() usage {
	now := startUsage()
	return usage{now.mallocs - u.mallocs, now.bytes - u.bytes, now.cpu - u.cpu}
}

// cpuTime is the CPU time the process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// metrics collects a benchmark's custom metrics over its iterations (one
// workload run each) and reports the median of each.
type metrics struct {
	units []string
	vals  map[string][]float64
}

func (m *metrics) add(unit string, v float64) {
	if m.vals == nil {
		m.vals = map[string][]float64{}
	}
	if _, ok := m.vals[unit]; !ok {
		m.units = append(m.units, unit)
	}
	m.vals[unit] = append(m.vals[unit], v)
}

func (m *metrics) report(b *testing.B) {
	for _, u := range m.units {
		v := slices.Clone(m.vals[u])
		slices.Sort(v)
		med := v[len(v)/2]
		if len(v)%2 == 0 {
			med = (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		b.ReportMetric(med, u)
	}
}

// cpuTicks are the clock ticks all the machine's CPUs have spent, busy
// (user, nice and system, as scripts/compare-peers.sh counts them) and in
// all, from /proc/stat; zero where there is no /proc/stat.
type cpuTicks struct{ busy, all int64 }

func machineTicks() cpuTicks {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return cpuTicks{}
	}
	var t cpuTicks
	for i, f := range fields[1:] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return cpuTicks{}
		}
		t.all += n
		if i < 3 {
			t.busy += n
		}
	}
	return t
}

// busyShare is the share of the machine's CPU time that was busy from t0
// to t1 (both cores at once on this machine count as 1), or -1 unknown.
func busyShare(t0, t1 cpuTicks) float64 {
	if t1.all <= t0.all {
		return -1
	}
	return float64(t1.busy-t0.busy) / float64(t1.all-t0.all)
}

// serverCPU is the CPU time (user and system) that the processes whose
// command line names dir have used so far: the members of a cluster the
// harness started, whose arguments carry its directory. It is 0 where
// /proc is missing. /proc counts in ticks of 10 ms (USER_HZ is 100 on
// Linux), so it suits phases of seconds.
func serverCPU(dir string) time.Duration {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var ticks int64
	for _, path := range cmdlines {
		cmd, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(cmd), dir) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(filepath.Dir(path), "stat"))
		if err != nil {
			continue
		}
		// The fields after the command's name, which may hold spaces:
		// state is the first, utime the 12th, stime the 13th.
		_, rest, ok := strings.Cut(string(stat), ") ")
		f := strings.Fields(rest)
		if !ok || len(f) < 13 {
			continue
		}
		u, errU := strconv.ParseInt(f[11], 10, 64)
		s, errS := strconv.ParseInt(f[12], 10, 64)
		if errU == nil && errS == nil {
			ticks += u + s
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
