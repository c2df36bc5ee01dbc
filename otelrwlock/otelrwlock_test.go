package otelrwlock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zkserver"
	"github.com/zkrwlock/rwlock/otelrwlock"
	"github.com/zkrwlock/rwlock/stats"
)

const sessionTimeout = 10 * time.Second

// connect opens a session of its own to the shared server.
func connect(t *testing.T) *zk.Conn {
	t.Helper()
	conn, _ := zkserver.Connect(t, shared.Get(t).Addrs(), sessionTimeout)
	return conn
}

func lockPath(t *testing.T) string {
	var b [4]byte
	rand.Read(b[:])
	return "/otelrwlock/" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + hex.EncodeToString(b[:])
}

// sdk is an OpenTelemetry SDK that keeps everything in memory.
type sdk struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	mp     *sdkmetric.MeterProvider
	tp     *sdktrace.TracerProvider
}

func newSDK(t *testing.T) *sdk {
	s := &sdk{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	s.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
	s.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.spans))
	t.Cleanup(func() {
		assert.NoError(t, s.mp.Shutdown(context.Background()))
		assert.NoError(t, s.tp.Shutdown(context.Background()))
	})
	return s
}

// metrics collects the observer's metrics by name.
func (s *sdk) metrics(t *testing.T) map[string]metricdata.Aggregation {
	var rm metricdata.ResourceMetrics
	require.NoError(t, s.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelrwlock.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

func attrs(kvs ...attribute.KeyValue) attribute.Set { return attribute.NewSet(kvs...) }

// sum returns a counter's value for one attribute set, or its total
// without one.
func sum(t *testing.T, data metricdata.Aggregation, set *attribute.Set) int64 {
	t.Helper()
	s, ok := data.(metricdata.Sum[int64])
	require.True(t, ok, "a counter: %T", data)
	var n int64
	for _, dp := range s.DataPoints {
		if set == nil || dp.Attributes.Equals(set) {
			n += dp.Value
		}
	}
	return n
}

// histogram returns a histogram's data point for one attribute set.
func histogram(t *testing.T, data metricdata.Aggregation, set attribute.Set) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	h, ok := data.(metricdata.Histogram[float64])
	require.True(t, ok, "a histogram: %T", data)
	for _, dp := range h.DataPoints {
		if dp.Attributes.Equals(&set) {
			return dp
		}
	}
	t.Fatalf("no data point with %v", set.Encoded(attribute.DefaultEncoder()))
	return metricdata.HistogramDataPoint[float64]{}
}

// gauge returns a gauge's values for one attribute set.
func gauge(t *testing.T, data metricdata.Aggregation, set attribute.Set) []float64 {
	t.Helper()
	g, ok := data.(metricdata.Gauge[float64])
	require.True(t, ok, "a gauge: %T", data)
	var vs []float64
	for _, dp := range g.DataPoints {
		if dp.Attributes.Equals(&set) {
			vs = append(vs, dp.Value)
		}
	}
	return vs
}

// signalLoss passes every event on, and closes lost once a grant is lost.
type signalLoss struct {
	rwlock.Observer
	lost chan struct{}
}

func (o signalLoss) ObserveGrant(e rwlock.GrantEvent) {
	o.Observer.ObserveGrant(e)
	if e.Loss != "" {
		close(o.lost)
	}
}

func TestObserverExportsTheLocksFigures(t *testing.T) {
	s := newSDK(t)
	obs, err := otelrwlock.NewObserver(otelrwlock.WithMeterProvider(s.mp), otelrwlock.WithTracerProvider(s.tp))
	require.NoError(t, err)
	path := lockPath(t)
	conn := connect(t)
	var ours, theirs stats.Recorder // what the metrics must say
	l, err := rwlock.New(conn, path, rwlock.WithSessionTimeout(sessionTimeout), rwlock.WithObserver(obs), rwlock.WithObserver(&ours))
	require.NoError(t, err)
	lossSeen := make(chan struct{})
	other, err := rwlock.New(connect(t), path, rwlock.WithObserver(&theirs), rwlock.WithObserver(signalLoss{obs, lossSeen}))
	require.NoError(t, err)

	ctx, parent := s.tp.Tracer("test").Start(t.Context(), "parent")
	for range 3 {
		require.NoError(t, l.WithRead(ctx, func(context.Context) error { return nil }))
	}
	const held = 50 * time.Millisecond
	g, err := l.Lock(ctx)
	require.NoError(t, err)
	time.Sleep(held) // the hold the histogram must show, not a synchronisation
	require.NoError(t, g.Release(ctx))

	w, err := other.Lock(ctx)
	require.NoError(t, err)
	_, err = l.TryRLock(ctx)
	require.ErrorIs(t, err, rwlock.ErrWouldBlock)
	require.NoError(t, conn.Delete(w.Node(), -1)) // someone deletes the holder's node
	<-w.Done()
	<-lossSeen // the observer hears of a loss after Done closes, not before
	parent.End()

	m := s.metrics(t)
	st, ost := ours.Stats(), theirs.Stats()
	p := otelrwlock.KeyPath.String(path)
	read, write := otelrwlock.KeyMode.String("read"), otelrwlock.KeyMode.String("write")
	granted := otelrwlock.KeyOutcome.String("granted")

	readGranted := attrs(p, read, granted)
	assert.Equal(t, int64(st.Read.Granted), sum(t, m["rwlock.acquisitions"], &readGranted))
	assert.Equal(t, int64(3), sum(t, m["rwlock.acquisitions"], &readGranted))
	wouldBlock := attrs(p, read, otelrwlock.KeyOutcome.String("would_block"))
	assert.Equal(t, int64(1), sum(t, m["rwlock.acquisitions"], &wouldBlock))
	assert.Equal(t, int64(st.Acquisitions()+ost.Acquisitions()), sum(t, m["rwlock.acquisitions"], nil))
	assert.Equal(t, int64(st.Read.OneRoundTrip+st.Write.OneRoundTrip+ost.Write.OneRoundTrip),
		sum(t, m["rwlock.acquisitions.one_round_trip"], nil))
	assert.Equal(t, int64(st.Requests+ost.Requests), sum(t, m["rwlock.requests"], nil))

	wait := histogram(t, m["rwlock.wait.duration"], readGranted)
	assert.Equal(t, st.Read.Wait.Count(), wait.Count)
	assert.InDelta(t, st.Read.Wait.Sum().Seconds(), wait.Sum, 1e-6)

	hold := histogram(t, m["rwlock.hold.duration"], attrs(p, write))
	assert.Equal(t, uint64(2), hold.Count, "ours and the other's")
	assert.GreaterOrEqual(t, hold.Sum, held.Seconds())

	lost := attrs(p, write, otelrwlock.KeyLossCause.String("node_deleted"))
	assert.Equal(t, int64(1), sum(t, m["rwlock.grants.lost"], &lost))
	assert.Equal(t, int64(ost.Lost.NodeDeleted), sum(t, m["rwlock.grants.lost"], nil))

	// One span per acquisition, children of the caller's span, as long as
	// the acquisition took.
	var names []string
	for _, sp := range s.spans.Ended() {
		if sp.Name() == "parent" {
			continue
		}
		names = append(names, sp.Name())
		assert.Equal(t, parent.SpanContext().SpanID(), sp.Parent().SpanID(), sp.Name())
		assert.Equal(t, trace.SpanKindInternal, sp.SpanKind())
		assert.Contains(t, sp.Attributes(), p)
		assert.Equal(t, codes.Unset, sp.Status().Code, "a TryRLock that would block is no error")
		assert.Less(t, sp.EndTime().Sub(sp.StartTime()), 10*time.Second)
	}
	assert.Equal(t, []string{"rwlock.RLock", "rwlock.RLock", "rwlock.RLock", "rwlock.Lock", "rwlock.Lock", "rwlock.TryRLock"}, names)

	// Once every call has returned and every grant ended, nothing is under
	// way (signalLoss passes on the ends only: they must not count).
	assert.Equal(t, int64(0), sum(t, m["rwlock.waiting"], nil))
	assert.Equal(t, int64(0), sum(t, m["rwlock.held"], nil))
	assert.Equal(t, []float64{0}, gauge(t, m["rwlock.wait.oldest"], attrs(p)))
}

func TestObserverMarksFailedWaits(t *testing.T) {
	s := newSDK(t)
	obs, err := otelrwlock.NewObserver(otelrwlock.WithMeterProvider(s.mp), otelrwlock.WithTracerProvider(s.tp))
	require.NoError(t, err)
	path := lockPath(t)
	holder, err := rwlock.New(connect(t), path)
	require.NoError(t, err)
	l, err := rwlock.New(connect(t), path, rwlock.WithObserver(obs))
	require.NoError(t, err)
	g, err := holder.Lock(t.Context())
	require.NoError(t, err)
	defer g.Release(context.Background())

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = l.RLock(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	spans := s.spans.Ended()
	require.Len(t, spans, 1)
	assert.Equal(t, codes.Unset, spans[0].Status().Code, "the caller's own deadline is no failure")
	require.NotEmpty(t, spans[0].Events(), "the error is recorded")
	assert.GreaterOrEqual(t, spans[0].EndTime().Sub(spans[0].StartTime()), 100*time.Millisecond)

	m := s.metrics(t)
	cancelled := attrs(otelrwlock.KeyPath.String(path), otelrwlock.KeyMode.String("read"), otelrwlock.KeyOutcome.String("cancelled"))
	assert.Equal(t, int64(1), sum(t, m["rwlock.acquisitions"], &cancelled))
	assert.Equal(t, uint64(1), histogram(t, m["rwlock.wait.duration"], cancelled).Count)
	assert.Equal(t, int64(0), sum(t, m["rwlock.waiting"], nil), "the wait has ended")
}

// A wait shows while it lasts: waiting, held and the oldest wait's age,
// and a wait of minutes lands in a bucket of its own.
func TestObserverShowsWaitsWhileTheyLast(t *testing.T) {
	s := newSDK(t)
	obs, err := otelrwlock.NewObserver(otelrwlock.WithMeterProvider(s.mp), otelrwlock.WithTracerProvider(s.tp))
	require.NoError(t, err)
	ctx := context.Background()
	const path = "/locks/config"
	began := time.Now().Add(-90 * time.Second)
	reader := rwlock.AcquireEvent{Lock: path, Mode: rwlock.Read, Start: began}
	for range 8 {
		obs.ObserveAcquireStart(ctx, reader)
	}
	writer := rwlock.GrantEvent{Lock: path, Node: path + "/write-0000000000", Mode: rwlock.Write}
	obs.ObserveGrantStart(writer)

	m := s.metrics(t)
	p := otelrwlock.KeyPath.String(path)
	read, write := attrs(p, otelrwlock.KeyMode.String("read")), attrs(p, otelrwlock.KeyMode.String("write"))
	assert.Equal(t, int64(8), sum(t, m["rwlock.waiting"], &read))
	assert.Equal(t, int64(1), sum(t, m["rwlock.held"], &write))
	oldest := gauge(t, m["rwlock.wait.oldest"], attrs(p))
	require.Len(t, oldest, 1)
	assert.GreaterOrEqual(t, oldest[0], 90.0)
	assert.Less(t, oldest[0], 100.0)

	obs.ObserveGrant(writer)
	reader.Outcome, reader.Wait = "granted", 90*time.Second
	for range 8 {
		obs.ObserveAcquire(ctx, reader)
	}
	m = s.metrics(t)
	assert.Equal(t, int64(0), sum(t, m["rwlock.waiting"], nil))
	assert.Equal(t, int64(0), sum(t, m["rwlock.held"], nil))
	assert.Equal(t, []float64{0}, gauge(t, m["rwlock.wait.oldest"], attrs(p)))
	wait := histogram(t, m["rwlock.wait.duration"], attrs(p, otelrwlock.KeyMode.String("read"), otelrwlock.KeyOutcome.String("granted")))
	i := slices.Index(wait.Bounds, 120)
	require.Positive(t, i, "a bound at two minutes")
	assert.Equal(t, uint64(8), wait.BucketCounts[i], "(60 s, 120 s]: not the overflow")
}

// WithPathAttribute drops rwlock.path from the metrics (or rewrites it),
// and the locks that map alike are counted together; spans keep it.
func TestObserverPathAttribute(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func(string) string
		want []attribute.KeyValue // the rwlock.path of the metrics, if any
	}{
		{"dropped", func(string) string { return "" }, nil},
		{"rewritten", func(string) string { return "/tenants/*/schema" }, []attribute.KeyValue{otelrwlock.KeyPath.String("/tenants/*/schema")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSDK(t)
			obs, err := otelrwlock.NewObserver(otelrwlock.WithMeterProvider(s.mp), otelrwlock.WithTracerProvider(s.tp),
				otelrwlock.WithPathAttribute(tc.f))
			require.NoError(t, err)
			ctx := context.Background()
			for _, lock := range []string{"/tenants/1/schema", "/tenants/2/schema"} {
				e := rwlock.AcquireEvent{Lock: lock, Mode: rwlock.Write, Start: time.Now()}
				obs.ObserveAcquireStart(ctx, e)
				obs.ObserveGrantStart(rwlock.GrantEvent{Lock: lock, Node: lock + "/write-0000000000", Mode: rwlock.Write})
				e.Outcome, e.Requests = "granted", 2
				obs.ObserveAcquire(ctx, e)
				obs.ObserveAcquireStart(ctx, rwlock.AcquireEvent{Lock: lock, Mode: rwlock.Read, Start: time.Now()})
			}
			m := s.metrics(t)
			read := attrs(append(tc.want, otelrwlock.KeyMode.String("read"))...)
			write := attrs(append(tc.want, otelrwlock.KeyMode.String("write"))...)
			granted := attrs(append(tc.want, otelrwlock.KeyMode.String("write"), otelrwlock.KeyOutcome.String("granted"))...)
			assert.Equal(t, int64(2), sum(t, m["rwlock.waiting"], &read), "both locks in one series")
			assert.Equal(t, int64(2), sum(t, m["rwlock.held"], &write))
			assert.Equal(t, int64(2), sum(t, m["rwlock.acquisitions"], &granted))
			byLock := attrs(tc.want...)
			assert.Equal(t, int64(4), sum(t, m["rwlock.requests"], &byLock))
			assert.Len(t, gauge(t, m["rwlock.wait.oldest"], attrs(tc.want...)), 1)
			for _, sp := range s.spans.Ended() {
				assert.Contains(t, []string{"/tenants/1/schema", "/tenants/2/schema"}, attrOf(sp.Attributes(), otelrwlock.KeyPath), "spans keep the path")
			}
		})
	}
}

// rwlock.relists adds up the events' Relists by path and mode.
func TestObserverCountsRelists(t *testing.T) {
	s := newSDK(t)
	obs, err := otelrwlock.NewObserver(otelrwlock.WithMeterProvider(s.mp), otelrwlock.WithTracerProvider(s.tp))
	require.NoError(t, err)
	ctx := context.Background()
	for _, e := range []rwlock.AcquireEvent{
		{Lock: "/a", Mode: rwlock.Write, Outcome: "granted", Relists: 1},
		{Lock: "/a", Mode: rwlock.Write, Outcome: "cancelled", Relists: 2},
		{Lock: "/a", Mode: rwlock.Read, Outcome: "granted"},
		{Lock: "/b", Mode: rwlock.Read, Outcome: "granted", Relists: 4},
	} {
		e.Start = time.Now()
		obs.ObserveAcquire(ctx, e)
	}
	m := s.metrics(t)
	aWrite := attrs(otelrwlock.KeyPath.String("/a"), otelrwlock.KeyMode.String("write"))
	bRead := attrs(otelrwlock.KeyPath.String("/b"), otelrwlock.KeyMode.String("read"))
	assert.Equal(t, int64(3), sum(t, m["rwlock.relists"], &aWrite))
	assert.Equal(t, int64(4), sum(t, m["rwlock.relists"], &bRead))
	assert.Equal(t, int64(7), sum(t, m["rwlock.relists"], nil))
}

// An Election's Campaign has a span of its own name.
func TestObserverNamesCampaignSpans(t *testing.T) {
	s := newSDK(t)
	obs, err := otelrwlock.NewObserver(otelrwlock.WithMeterProvider(s.mp), otelrwlock.WithTracerProvider(s.tp))
	require.NoError(t, err)
	obs.ObserveAcquire(context.Background(), rwlock.AcquireEvent{Lock: "/e", Mode: rwlock.Write, Outcome: "granted",
		Campaign: true, Start: time.Now()})
	var names []string
	for _, sp := range s.spans.Ended() {
		names = append(names, sp.Name())
	}
	assert.Equal(t, []string{"rwlock.Campaign"}, names)
}

func attrOf(kvs []attribute.KeyValue, k attribute.Key) string {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value.AsString()
		}
	}
	return ""
}

// A failure of the lock is a span error; the caller's own deadline or
// cancel is not.
func TestObserverSpanStatus(t *testing.T) {
	s := newSDK(t)
	obs, err := otelrwlock.NewObserver(otelrwlock.WithMeterProvider(s.mp), otelrwlock.WithTracerProvider(s.tp))
	require.NoError(t, err)
	ctx := context.Background()
	for _, e := range []rwlock.AcquireEvent{
		{Lock: "/a", Outcome: "cancelled", Err: context.DeadlineExceeded, Start: time.Now()},
		{Lock: "/a", Outcome: "cancelled", Err: context.Canceled, Start: time.Now()},
		{Lock: "/a", Outcome: "failed", Err: rwlock.ErrLost, Start: time.Now()},
	} {
		obs.ObserveAcquire(ctx, e)
	}
	spans := s.spans.Ended()
	require.Len(t, spans, 3)
	var got []codes.Code
	for _, sp := range spans {
		got = append(got, sp.Status().Code)
		assert.NotEmpty(t, sp.Events(), "the error is recorded")
	}
	assert.Equal(t, []codes.Code{codes.Unset, codes.Unset, codes.Error}, got)
}
