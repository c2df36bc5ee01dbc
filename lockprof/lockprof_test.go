package lockprof_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/lockprof"
)

// newLock returns a lock at path on a session of its own.
func newLock(t testing.TB, path string, opts ...rwlock.Option) *rwlock.RWLock {
	t.Helper()
	conn, _ := zkserver.Connect(t, shared.Get(t).Addrs(), sessionTimeout)
	l, err := rwlock.New(conn, path, append([]rwlock.Option{rwlock.WithSessionTimeout(sessionTimeout)}, opts...)...)
	require.NoError(t, err)
	return l
}

// lockPath returns a lock path no other test uses.
func lockPath(t testing.TB) string {
	var b [4]byte
	rand.Read(b[:])
	return "/lockprof/" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + hex.EncodeToString(b[:])
}

// profileRate sets the contention profile's rate for one test.
func profileRate(t *testing.T, rate int) {
	old := rwlock.SetContentionProfileRate(rate)
	t.Cleanup(func() { rwlock.SetContentionProfileRate(old) })
}

// waitHere is the call site the profile must name.
func waitHere(ctx context.Context, l *rwlock.RWLock) (*rwlock.Grant, error) { return l.RLock(ctx) }

// samplesOf returns the samples of one lock path.
func samplesOf(p *profile.Profile, path string) []*profile.Sample {
	var out []*profile.Sample
	for _, s := range p.Sample {
		if len(s.Label["lock"]) == 1 && s.Label["lock"][0] == path {
			out = append(out, s)
		}
	}
	return out
}

func functionNames(s *profile.Sample) []string {
	var names []string
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			names = append(names, line.Function.Name)
		}
	}
	return names
}

// A reader waits behind a writer; the profile, written and parsed back
// with the pprof library, has the reader's wait at its call site.
func TestProfileNamesTheCallSite(t *testing.T) {
	profileRate(t, 1)
	path := lockPath(t)
	writer, reader := newLock(t, path), newLock(t, path)
	ctx := t.Context()
	w, err := writer.Lock(ctx)
	require.NoError(t, err)

	got := make(chan error, 1)
	go func() {
		g, err := waitHere(ctx, reader)
		if err == nil {
			err = g.Release(ctx)
		}
		got <- err
	}()
	require.Eventually(t, func() bool {
		q, err := writer.Queue(ctx)
		return err == nil && len(q) == 2
	}, 30*time.Second, 5*time.Millisecond, "the reader queues behind the writer")
	const hold = 100 * time.Millisecond
	time.Sleep(hold) // the wait the profile must show, not a synchronisation
	require.NoError(t, w.Release(ctx))
	require.NoError(t, <-got)

	var buf bytes.Buffer
	require.NoError(t, lockprof.Write(&buf))
	p, err := profile.Parse(&buf)
	require.NoError(t, err)
	require.NoError(t, p.CheckValid())
	assert.Equal(t, "contentions/count delay/nanoseconds", sampleTypes(p))
	assert.Equal(t, int64(1), p.Period)
	assert.Equal(t, "delay", p.DefaultSampleType)

	samples := samplesOf(p, path)
	require.Len(t, samples, 2, "the writer's grant and the reader's")
	var read *profile.Sample
	for _, s := range samples {
		if s.Label["mode"][0] == "read" {
			read = s
		}
	}
	require.NotNil(t, read)
	names := functionNames(read)
	require.GreaterOrEqual(t, len(names), 3)
	assert.Equal(t, []string{"github.com/zkrwlock/rwlock.(*RWLock).RLock", "github.com/zkrwlock/rwlock/lockprof_test.waitHere"}, names[:2], "%v", names)
	assert.Contains(t, names, "github.com/zkrwlock/rwlock/lockprof_test.TestProfileNamesTheCallSite.func1")
	assert.Equal(t, []string{"granted"}, read.Label["outcome"])
	assert.Equal(t, int64(1), read.Value[0], "one contention")
	assert.GreaterOrEqual(t, time.Duration(read.Value[1]), hold, "the reader waited at least as long as the writer held")
}

func sampleTypes(p *profile.Profile) string {
	var ts []string
	for _, st := range p.SampleType {
		ts = append(ts, st.Type+"/"+st.Unit)
	}
	return strings.Join(ts, " ")
}

// run is an M whose tests are one function.
type run func() int

func (r run) Run() int { return r() }

func TestWrapWritesTheProfileOfTheRun(t *testing.T) {
	path := lockPath(t)
	l := newLock(t, path)
	file := filepath.Join(t.TempDir(), "lock.pprof")
	setFlag(t, "lockprofile", file)
	setFlag(t, "lockprofilerate", "1")
	before := rwlock.SetContentionProfileRate(-1)

	code := lockprof.Wrap(run(func() int {
		assert.Equal(t, 1, rwlock.SetContentionProfileRate(-1), "on while the tests run")
		g, err := l.Lock(t.Context())
		if err != nil {
			return 1
		}
		if err := g.Release(t.Context()); err != nil {
			return 1
		}
		return 0
	})).Run()
	require.Equal(t, 0, code)
	assert.Equal(t, before, rwlock.SetContentionProfileRate(-1), "restored after")

	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	p, err := profile.Parse(f)
	require.NoError(t, err)
	samples := samplesOf(p, path)
	require.Len(t, samples, 1)
	assert.Equal(t, []string{"write"}, samples[0].Label["mode"])
	assert.Equal(t, []string{"false"}, samples[0].Label["contended"])
	assert.Equal(t, int64(1), p.Period, "the rate of the run, not the rate restored after it")
	assert.Contains(t, functionNames(samples[0]), "github.com/zkrwlock/rwlock/lockprof_test.TestWrapWritesTheProfileOfTheRun.func1")
}

func TestWrapWithoutTheFlagOnlyRuns(t *testing.T) {
	setFlag(t, "lockprofile", "")
	ran := false
	code := lockprof.Wrap(run(func() int { ran = true; return 3 })).Run()
	assert.True(t, ran)
	assert.Equal(t, 3, code)
}

// setFlag sets a flag for one test.
func setFlag(t *testing.T, name, value string) {
	f := flag.Lookup(name)
	require.NotNil(t, f, "Wrap, in TestMain, defines -%s", name)
	old := f.Value.String()
	require.NoError(t, flag.Set(name, value))
	t.Cleanup(func() { flag.Set(name, old) })
}
