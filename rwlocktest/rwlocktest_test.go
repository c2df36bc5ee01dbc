package rwlocktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/rwlocktest"
	"github.com/zkrwlock/rwlock/stats"
)

// A benchmark run with testing.Benchmark hands back what it reported.
func TestReportMetrics(t *testing.T) {
	zk := zkserver.StartStandalone(t)
	conn, _ := zkserver.Connect(t, zk.Addrs(), 10*time.Second)
	var rec *stats.Recorder
	res := testing.Benchmark(func(b *testing.B) {
		rec = new(stats.Recorder)
		lock, err := rwlock.New(conn, "/rwlocktest/report", rwlock.WithObserver(rec))
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		for b.Loop() {
			g, err := lock.RLock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := g.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
		rwlocktest.ReportMetrics(b, rec.Stats())
	})
	require.Positive(t, res.N)
	st := rec.Stats()
	assert.Equal(t, uint64(res.N), st.Read.Granted, "the Recorder of the last run")
	for _, unit := range []string{rwlocktest.UnitWaitP50, rwlocktest.UnitWaitP99, rwlocktest.UnitRequests, rwlocktest.UnitRelists, rwlocktest.UnitLostByGrant} {
		assert.Contains(t, res.Extra, unit)
	}
	assert.Zero(t, res.Extra[rwlocktest.UnitRelists], "nobody in the way: no listing but the first")
	assert.Equal(t, float64(st.Read.Wait.Quantile(0.5).Nanoseconds()), res.Extra[rwlocktest.UnitWaitP50])
	assert.Positive(t, res.Extra[rwlocktest.UnitWaitP50])
	assert.GreaterOrEqual(t, res.Extra[rwlocktest.UnitWaitP99], res.Extra[rwlocktest.UnitWaitP50])
	// Create, list, delete. A few more: the run's first acquisition makes
	// the directory and checks the DELETE permission, and, with the CPU
	// busy, a listing now and then overtakes its create and is sent again.
	assert.GreaterOrEqual(t, res.Extra[rwlocktest.UnitRequests], 3.0)
	assert.LessOrEqual(t, res.Extra[rwlocktest.UnitRequests], 3.25, "create, list, delete")
	assert.Zero(t, res.Extra[rwlocktest.UnitLostByGrant])
	assert.NotContains(t, res.Extra, rwlocktest.UnitHeld, "every grant was released")
	assert.NotContains(t, res.Extra, rwlocktest.UnitWaiting)
}

// A benchmark that leaves a grant held and a call waiting says so.
func TestReportMetricsOfWhatIsLeft(t *testing.T) {
	res := testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
		}
		rwlocktest.ReportMetrics(b, stats.Stats{
			Read:  stats.ModeStats{Cancelled: 1, Waiting: 1},
			Write: stats.ModeStats{Granted: 2, Held: 1},
		})
	})
	assert.Equal(t, 1.0, res.Extra[rwlocktest.UnitWaiting])
	assert.Equal(t, 1.0, res.Extra[rwlocktest.UnitHeld])
}

func TestReportStatsOfNothingReportsNothing(t *testing.T) {
	res := testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
		}
		rwlocktest.ReportMetrics(b, stats.Stats{})
	})
	assert.Empty(t, res.Extra)
}
