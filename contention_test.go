package rwlock_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
)

// profileRate sets the contention profile's rate for one test.
func profileRate(t *testing.T, rate int) {
	old := rwlock.SetContentionProfileRate(rate)
	t.Cleanup(func() { rwlock.SetContentionProfileRate(old) })
}

var profiled atomic.Int64

// profilePath names a lock no other run has profiled: the profile is global
// and outlives a test, so a name reused under -count would add up.
func profilePath(t *testing.T) string {
	return fmt.Sprintf("/profile/%s-%d", t.Name(), profiled.Add(1))
}

// records returns the contention records of one lock path.
func records(path string) []rwlock.ContentionRecord {
	var out []rwlock.ContentionRecord
	for _, r := range rwlock.ContentionRecords() {
		if r.Lock == path {
			out = append(out, r)
		}
	}
	return out
}

func functions(frames []runtime.Frame) []string {
	var fs []string
	for _, f := range frames {
		fs = append(fs, strings.TrimPrefix(f.Function, "github.com/zkrwlock/"))
	}
	return fs
}

// lockHere, readHere and batchHere are the call sites the profile must name.
func lockHere(ctx context.Context, l *rwlock.RWLock) error {
	g, err := l.Lock(ctx)
	if err != nil {
		return err
	}
	return g.Release(ctx)
}

func readHere(ctx context.Context, l *rwlock.RWLock) error {
	return l.WithRead(ctx, func(context.Context) error { return nil })
}

func batchHere(ctx context.Context, l *rwlock.RWLock) error {
	return l.ReadBatch(ctx, func(context.Context) error { return nil })
}

func TestContentionProfileNamesTheCaller(t *testing.T) {
	profileRate(t, 1)
	path := profilePath(t)
	l := rwlock.NewFakeLock(t, path)
	ctx := t.Context()
	for range 3 {
		require.NoError(t, lockHere(ctx, l))
	}
	require.NoError(t, readHere(ctx, l))
	require.NoError(t, batchHere(ctx, l))
	g, err := l.Lock(ctx)
	require.NoError(t, err)
	_, err = l.TryRLock(ctx)
	require.ErrorIs(t, err, rwlock.ErrWouldBlock)
	require.NoError(t, g.Release(ctx))

	want := map[string]struct {
		mode      rwlock.Mode
		outcome   string
		contended bool
		count     int64
	}{
		"rwlock.(*RWLock).Lock rwlock_test.lockHere":                                {rwlock.Write, "granted", false, 3},
		"rwlock.(*RWLock).WithRead rwlock_test.readHere":                            {rwlock.Read, "granted", false, 1},
		"rwlock.(*RWLock).ReadBatch rwlock_test.batchHere":                          {rwlock.Read, "granted", false, 1},
		"rwlock.(*RWLock).Lock rwlock_test.TestContentionProfileNamesTheCaller":     {rwlock.Write, "granted", false, 1},
		"rwlock.(*RWLock).TryRLock rwlock_test.TestContentionProfileNamesTheCaller": {rwlock.Read, "would_block", true, 1},
	}
	rs := records(path)
	require.Len(t, rs, len(want))
	for _, r := range rs {
		fs := functions(r.Frames)
		require.GreaterOrEqual(t, len(fs), 2, "the entry point and its caller")
		site := fs[0] + " " + fs[1]
		w, ok := want[site]
		require.True(t, ok, "unexpected call site %q (stack %v)", site, fs)
		assert.Equal(t, w.mode, r.Mode, site)
		assert.Equal(t, w.outcome, r.Outcome, site)
		assert.Equal(t, w.contended, r.Contended, site)
		assert.Equal(t, w.count, r.Count, site)
		assert.Positive(t, r.Delay, site)
		assert.True(t, slices.Contains(fs, "rwlock_test.TestContentionProfileNamesTheCaller"), "the whole stack: %v", fs)
		assert.NotContains(t, fs, "rwlock.(*RWLock).acquire", "no frames of the lock below the entry point")
	}
}

func TestContentionProfileOffRecordsNothing(t *testing.T) {
	profileRate(t, 0)
	path := profilePath(t)
	require.NoError(t, lockHere(t.Context(), rwlock.NewFakeLock(t, path)))
	assert.Empty(t, records(path))
	assert.Equal(t, 0, rwlock.SetContentionProfileRate(-1), "a negative rate reads the rate")
}

// At rate n, about one acquisition in n is sampled, and counts for n.
func TestContentionProfileSamples(t *testing.T) {
	profileRate(t, 4)
	path := profilePath(t)
	l := rwlock.NewFakeLock(t, path)
	for range 400 {
		require.NoError(t, lockHere(t.Context(), l))
	}
	rs := records(path)
	require.Len(t, rs, 1)
	assert.Zero(t, rs[0].Count%4, "each sample counts for the rate")
	assert.InDelta(t, 400, rs[0].Count, 150, "binomial(400, 1/4) samples: a standard deviation of 35 in the count")
}
