package bench

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/zkrwlock/rwlock/stats"
)

var flagJSON = flag.String("bench.json", "", "append one JSON line per workload run to this file, "+
	"in the format of the peers' harnesses (bench/peers)")

// record is one workload run as the peers print it: a JSON object whose
// keys keep the order they were put in, floats rounded to 3 decimals.
type record struct {
	keys []string
	vals map[string]any
}

func newRecord(workload string) *record {
	r := &record{vals: map[string]any{}}
	r.put("impl", "zkrwlock")
	r.put("workload", workload)
	return r
}

func (r *record) put(k string, v any) {
	if f, ok := v.(float64); ok {
		v = math.Round(f*1000) / 1000
	}
	if _, ok := r.vals[k]; !ok {
		r.keys = append(r.keys, k)
	}
	r.vals[k] = v
}

// String formats the record as json.dumps does: `{"k": v, "k2": v2}`.
func (r *record) String() string {
	parts := make([]string, 0, len(r.keys))
	for _, k := range r.keys {
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(r.vals[k])
		if err != nil {
			vb = []byte("null")
		}
		parts = append(parts, string(kb)+": "+string(vb))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// reqPerAcq puts the peers' request count: ZooKeeper packets between two
// mntr snapshots, minus the second snapshot's own four-letter-word packet
// on each server and other packets that are not the workload's (W6's
// polling), per acquisition.
func (r *record) reqPerAcq(s *servers, p0, p1, other, acquisitions int64) float64 {
	net := p1 - p0 - int64(len(s.addrs)) - other
	r.put("zk_packets", net)
	if acquisitions <= 0 {
		r.put("zk_req_per_acq", nil)
		return 0
	}
	per := float64(net) / float64(acquisitions)
	r.put("zk_req_per_acq", per)
	return per
}

// relistsPerAcq puts the lock's own count of relists (stats.ModeStats.Relists:
// listings between a release and a grant) per acquisition, and reports it.
func (r *record) relistsPerAcq(m *metrics, s stats.Stats, acquisitions int64) {
	if acquisitions <= 0 {
		return
	}
	per := float64(s.Read.Relists+s.Write.Relists) / float64(acquisitions)
	r.put("relists_per_acq", per)
	m.add("relists/acquire", per)
}

// usagePerAcq puts the process's allocations and CPU time per
// acquisition (extra keys: the peers report neither).
func (r *record) usagePerAcq(m *metrics, u usage, acquisitions int64) {
	if acquisitions <= 0 {
		return
	}
	n := float64(acquisitions)
	a, by, cpu := float64(u.mallocs)/n, float64(u.bytes)/n, us(u.cpu)/n
	r.put("allocs_per_acq", a)
	r.put("bytes_per_acq", by)
	r.put("client_cpu_us_per_acq", cpu)
	m.add("allocs/acquire", a)
	m.add("B/acquire", by)
	m.add("cpu-us/acquire", cpu)
}

var jsonMu sync.Mutex

// emit logs the record and appends it to the -bench.json file. A nil
// record (a run that failed before it measured anything) is skipped.
func emit(b *testing.B, r *record) {
	b.Helper()
	if r == nil {
		return
	}
	line := r.String()
	b.Log(line)
	if *flagJSON == "" {
		return
	}
	jsonMu.Lock()
	defer jsonMu.Unlock()
	f, err := os.OpenFile(*flagJSON, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatalf("-bench.json: %v", err)
	}
	_, err = fmt.Fprintln(f, line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		b.Fatalf("-bench.json: %v", err)
	}
}
