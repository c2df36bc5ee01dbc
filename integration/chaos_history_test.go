package integration

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// What a chaos run keeps (TestChaos, -chaos.keep). Every run adds one line
// of figures to runs.jsonl: the closing note of a series of runs counts
// them from there. A run that fails (a violation, a node left behind, a
// race of ours, or an error of its own) also keeps its history in a
// directory of its own: the events (gzipped JSON lines), the faults, the figures and the
// violations, the flags, every client's stderr and every server's log.

// chaosSummary is one run's figures.
type chaosSummary struct {
	Seed    uint64
	Start   time.Time
	Minutes float64   // of faults
	T       string    // the session timeouts the clients asked for
	Clients int       // running at once
	Started int       // client processes started, replacements included
	Race    bool      // the clients were built with the race detector
	Args    []string  // the run's command line
	Paths   [2]string // locks a and b
	Faults  map[string]int
	chaosReport
	LateSteps         int      // len(Violations): runs.jsonl lists only the first few
	NoFaultLosses     int      // len(FalseLosses), likewise
	Orphans           []string // nodes left after every client stopped
	ZKRaces, OurRaces int      // race reports: go-zookeeper's own, and ours
	ClientErrors      int      // what the clients printed as errors: failed acquisitions, refused downgrades
	Failed            bool
	History           string `json:",omitempty"` // where the history is kept

	races []raceReport
}

// summarize counts a run's figures. The caller holds r.mu, and every
// client has exited.
func (r *chaosRun) summarize() *chaosSummary {
	if r.summary != nil {
		return r.summary
	}
	s := &chaosSummary{Seed: r.seed, Start: r.start, Minutes: chaosDuration.Minutes(), T: *chaosTimeouts,
		Clients: *chaosClients, Started: len(r.procs), Race: *chaosRace, Args: os.Args, Paths: r.paths,
		Faults: map[string]int{}, Orphans: r.orphans, ClientErrors: len(r.errors)}
	for _, f := range r.faults {
		s.Faults[strings.SplitN(f.Kind, "(", 2)[0]]++
	}
	s.chaosReport = check(r.events, r.faults, 2*slices.Max(r.timeouts))
	s.LateSteps, s.NoFaultLosses = len(s.Violations), len(s.FalseLosses)
	for _, p := range r.procs {
		for _, rr := range raceReports(p.id, p.stderr.String()) {
			s.races = append(s.races, rr)
			if rr.Ours {
				s.OurRaces++
			} else {
				s.ZKRaces++
			}
		}
	}
	r.summary = s
	return s
}

// chaosShown is how many violations, losses with no fault near and losses
// of other causes a run prints, and runs.jsonl lists: the history has them
// all.
const chaosShown = 20

func firstOf(s []string) []string { return s[:min(len(s), chaosShown)] }

// keep writes the run's figures to runs.jsonl, and its history if it
// failed. It runs as a cleanup: after the clients have been stopped, and
// before the servers are, so that their logs are still there.
func (r *chaosRun) keep() {
	t := r.t
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.summarize()
	s.Failed = t.Failed()
	if err := os.MkdirAll(*chaosKeep, 0o755); err != nil {
		t.Errorf("chaos: keep: %v", err)
		return
	}
	if s.Failed {
		dir := filepath.Join(*chaosKeep, fmt.Sprintf("%s-seed%d", s.Start.Format("20060102-150405"), s.Seed))
		if err := r.writeHistory(dir, s); err != nil {
			t.Errorf("chaos: keeping the history in %s: %v", dir, err)
		} else {
			s.History = dir
			t.Logf("chaos: history kept in %s", dir)
		}
	}
	short := *s
	short.Violations, short.FalseLosses, short.OtherLosses = firstOf(s.Violations), firstOf(s.FalseLosses), firstOf(s.OtherLosses)
	line, err := json.Marshal(short)
	if err == nil {
		err = appendLine(filepath.Join(*chaosKeep, "runs.jsonl"), line)
	}
	if err != nil {
		t.Errorf("chaos: keep: %v", err)
		return
	}
	t.Logf("chaos: figures added to %s", filepath.Join(*chaosKeep, "runs.jsonl"))
}

func appendLine(path string, line []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(line, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeHistory writes a failed run's history to dir.
func (r *chaosRun) writeHistory(dir string, s *chaosSummary) error {
	if err := os.MkdirAll(filepath.Join(dir, "clients"), 0o755); err != nil {
		return err
	}
	report, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	faults, err := json.MarshalIndent(r.faults, "", "  ")
	if err != nil {
		return err
	}
	var events bytes.Buffer
	zw := gzip.NewWriter(&events)
	enc := json.NewEncoder(zw)
	for _, e := range r.events {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	files := map[string]string{
		"report.json":     string(report),
		"faults.json":     string(faults),
		"events.jsonl.gz": events.String(),
		"errors.txt":      strings.Join(r.errors, "\n"),
	}
	for _, p := range r.procs {
		if p.stderr.Len() > 0 {
			files[filepath.Join("clients", fmt.Sprintf("c%d.stderr", p.id))] = p.stderr.String()
		}
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return copyServerLogs(r.cl.Dir(), r.cl.Len(), filepath.Join(dir, "servers"))
}

// copyServerLogs copies every member's zk.log into dir.
func copyServerLogs(clusterDir string, members int, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := range members {
		name := fmt.Sprintf("member-%d", i)
		src, err := os.Open(filepath.Join(clusterDir, name, "zk.log"))
		if err != nil {
			return err
		}
		dst, err := os.Create(filepath.Join(dir, name+".log"))
		if err == nil {
			_, err = io.Copy(dst, src)
			if cerr := dst.Close(); err == nil {
				err = cerr
			}
		}
		src.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
