// Package rwlocktest helps test and measure code that uses the lock, as
// net/http/httptest does for HTTP: a throwaway ZooKeeper for a test, and a
// benchmark's lock figures.
//
// # A server for a test
//
// [StartServer] starts a real ZooKeeper server for one test, and the test's
// cleanup stops it; [StartEnsemble] starts several. [Server.Dial] connects
// to it. [Server.Stop], [Server.Kill] and [Server.Start] make outages:
//
//	func TestConfigReload(t *testing.T) {
//		zk := rwlocktest.StartServer(t)
//		conn := zk.Dial(t, 10*time.Second)
//		lock, err := rwlock.New(conn, "/locks/config")
//		...
//	}
//
// It runs Apache ZooKeeper on the installed JVM (Debian's zookeeper
// package, or the jars ZOOKEEPER_CLASSPATH names), and skips the test when
// there is none, unless ZKRWLOCK_REQUIRE_ZK=1 or CI is set.
//
// # A benchmark's figures
//
// [ReportMetrics] reports locks' figures (see package stats) from a
// benchmark, the Go way: through [testing.B.ReportMetric], so that go test -bench prints them
// beside ns/op and benchstat compares them between two runs of your code.
//
// After the benchmark's loop, one call:
//
//	func BenchmarkConfigReload(b *testing.B) {
//		var rec stats.Recorder
//		lock, _ := rwlock.New(conn, "/locks/config", rwlock.WithObserver(&rec))
//		for b.Loop() {
//			reload(ctx, lock)
//		}
//		rwlocktest.ReportMetrics(b, rec.Stats())
//	}
//
// prints lines such as this one, of the module lockprof's BenchmarkDemo
// (config readers and a migration job):
//
//	BenchmarkDemo-2   200   16212059 ns/op   0 lost/grant   7093109 p50-ns/acquire   32222740 p99-ns/acquire   5.772 req/acquire
//
// The contention profile, which says where the waits came from, is written
// by the module github.com/zkrwlock/rwlock/lockprof (it needs
// github.com/google/pprof, which this module does without).
package rwlocktest

import (
	"testing"

	"github.com/zkrwlock/rwlock/stats"
)

// The metrics' units. Latencies are of the acquisitions that were granted,
// from the call to the grant.
const (
	UnitWaitP50     = "p50-ns/acquire"  // median wait
	UnitWaitP99     = "p99-ns/acquire"  // 99th percentile of the wait
	UnitRequests    = "req/acquire"     // requests to ZooKeeper per acquisition, its release included
	UnitRelists     = "relists/acquire" // listings between a release and a grant per acquisition (stats.ModeStats.Relists)
	UnitLostByGrant = "lost/grant"      // the share of grants that were lost, not released
	// What is under way at the snapshot, reported only when there is any:
	// a benchmark that ends with grants still held, or calls still
	// waiting, has left them behind.
	UnitWaiting = "waiting" // acquisitions in progress
	UnitHeld    = "held"    // grants held
)

// ReportMetrics reports s (see package stats): the median and 99th
// percentile wait of the grants, requests and relists per acquisition, the
// share of grants lost, and what is under way if anything is. For the figures of the benchmark's loop alone, take a
// snapshot before it and pass the difference:
//
//	before := rec.Stats()
//	for b.Loop() { ... }
//	rwlocktest.ReportMetrics(b, rec.Stats().Sub(before))
//
// It reports nothing if s counts no acquisition.
func ReportMetrics(b *testing.B, s stats.Stats) {
	b.Helper()
	acquisitions := s.Acquisitions()
	if acquisitions == 0 {
		return
	}
	wait := s.Wait()
	b.ReportMetric(float64(wait.Quantile(0.5).Nanoseconds()), UnitWaitP50)
	b.ReportMetric(float64(wait.Quantile(0.99).Nanoseconds()), UnitWaitP99)
	b.ReportMetric(float64(s.Requests)/float64(acquisitions), UnitRequests)
	b.ReportMetric(float64(s.Read.Relists+s.Write.Relists)/float64(acquisitions), UnitRelists)
	if granted := s.Granted(); granted > 0 {
		b.ReportMetric(float64(s.Lost.Total())/float64(granted), UnitLostByGrant)
	}
	if n := s.Read.Waiting + s.Write.Waiting; n > 0 {
		b.ReportMetric(float64(n), UnitWaiting)
	}
	if n := s.Read.Held + s.Write.Held; n > 0 {
		b.ReportMetric(float64(n), UnitHeld)
	}
}
