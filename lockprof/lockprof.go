// Package lockprof writes zkrwlock's contention profile in the pprof
// format, for go tool pprof: where the program waited for locks, and for
// how long, the way the mutex profile does for sync.Mutex.
//
// The lock records the profile itself, sampled, once
// [rwlock.SetContentionProfileRate] is set (it is off by default); this
// package turns the records into a profile with the sample types
// contentions/count and delay/nanoseconds, one sample per call stack, lock
// path, mode, outcome and contention. The stack starts at the lock's entry
// point (Lock, RLock, WithRead, ReadBatch, ...) and goes on with its
// callers. The lock path, the mode, the outcome and whether another node
// was in the way are the sample's labels lock, mode, outcome and contended
// (true or false). go tool pprof -tags lists them;
// -tagfocus=lock=/locks/schema picks one lock; -tagfocus=contended=true
// keeps the waits behind another holder, as Go's mutex profile has them;
// -tagleaf=lock makes the path a frame of its own.
//
// From go test -bench, wrap the tests of the package in TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(lockprof.Wrap(m).Run()) }
//
// and ask for the profile as for the mutex profile:
//
//	go test -run '^$' -bench . -lockprofile lock.pprof
//	go tool pprof -top lock.pprof
//
// It is a module of its own, so that the lock itself does not depend on
// github.com/google/pprof.
package lockprof

import (
	"io"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/google/pprof/profile"

	"github.com/zkrwlock/rwlock"
)

// Profile returns the contention profile recorded so far. Counts and
// delays are estimates of all acquisitions, as the mutex profile's are:
// each sampled acquisition counts for as many as the rate it was sampled
// at. The profile's Period is the rate in force when Profile is called:
// Wrap calls it before it turns the profile off again.
func Profile() *profile.Profile {
	b := builder{
		p: &profile.Profile{
			SampleType: []*profile.ValueType{
				{Type: "contentions", Unit: "count"},
				{Type: "delay", Unit: "nanoseconds"},
			},
			DefaultSampleType: "delay",
			PeriodType:        &profile.ValueType{Type: "contentions", Unit: "count"},
			Period:            int64(rwlock.SetContentionProfileRate(-1)),
			TimeNanos:         time.Now().UnixNano(),
		},
		locs:  map[frameKey]*profile.Location{},
		funcs: map[funcKey]*profile.Function{},
	}
	// The frames come symbolized already: a mapping that says so keeps
	// pprof from looking for the binary to symbolize them again.
	b.mapping = &profile.Mapping{
		ID: 1, File: executable(),
		HasFunctions: true, HasFilenames: true, HasLineNumbers: true, HasInlineFrames: true,
	}
	b.p.Mapping = []*profile.Mapping{b.mapping}
	for _, r := range rwlock.ContentionRecords() {
		s := &profile.Sample{
			Value: []int64{r.Count, r.Delay.Nanoseconds()},
			Label: map[string][]string{
				"lock":    {r.Lock},
				"mode":    {r.Mode.String()},
				"outcome": {r.Outcome}, "contended": {strconv.FormatBool(r.Contended)},
			},
		}
		for _, f := range r.Frames {
			s.Location = append(s.Location, b.location(f))
		}
		b.p.Sample = append(b.p.Sample, s)
	}
	return b.p
}

// Write writes the contention profile recorded so far to w, as a gzipped
// protocol buffer: the format go tool pprof reads.
func Write(w io.Writer) error { return Profile().Write(w) }

// WriteFile writes the contention profile recorded so far to the file
// name.
func WriteFile(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := Write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

type frameKey struct {
	function, file string
	line           int
}

type funcKey struct{ name, file string }

// builder gives each function and each line one Location of its own.
// (runtime/pprof groups the frames inlined at one program counter into
// one Location; pprof's views are the same either way.)
type builder struct {
	p       *profile.Profile
	mapping *profile.Mapping
	locs    map[frameKey]*profile.Location
	funcs   map[funcKey]*profile.Function
}

func (b *builder) location(f runtime.Frame) *profile.Location {
	k := frameKey{f.Function, f.File, f.Line}
	if loc := b.locs[k]; loc != nil {
		return loc
	}
	fk := funcKey{f.Function, f.File}
	fn := b.funcs[fk]
	if fn == nil {
		fn = &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: f.Function, SystemName: f.Function, Filename: f.File}
		b.funcs[fk] = fn
		b.p.Function = append(b.p.Function, fn)
	}
	loc := &profile.Location{
		ID: uint64(len(b.p.Location) + 1), Mapping: b.mapping, Address: uint64(f.PC),
		Line: []profile.Line{{Function: fn, Line: int64(f.Line)}},
	}
	b.locs[k] = loc
	b.p.Location = append(b.p.Location, loc)
	return loc
}

func executable() string {
	if exe, err := os.Executable(); err == nil {
		return exe
	}
	return os.Args[0]
}
