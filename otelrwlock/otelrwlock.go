// Package otelrwlock exports zkrwlock's figures as OpenTelemetry metrics,
// and each wait for a lock as a span: the figures of package stats, event
// by event, as the instruments that a Go service's dashboards and
// alerts already read.
//
//	obs, err := otelrwlock.NewObserver() // the global MeterProvider and TracerProvider
//	lock, err := rwlock.New(conn, "/locks/schema", rwlock.WithObserver(obs))
//
// Instruments (meter "github.com/zkrwlock/rwlock/otelrwlock"):
//
//	rwlock.acquisitions                     counter    {acquisition}  rwlock.path, rwlock.mode, rwlock.outcome
//	rwlock.acquisitions.one_round_trip      counter    {acquisition}  rwlock.path, rwlock.mode
//	rwlock.relists                          counter    {listing}      rwlock.path, rwlock.mode
//	rwlock.wait.duration                    histogram  s              rwlock.path, rwlock.mode, rwlock.outcome
//	rwlock.hold.duration                    histogram  s              rwlock.path, rwlock.mode
//	rwlock.grants.lost                      counter    {grant}        rwlock.path, rwlock.mode, rwlock.loss_cause
//	rwlock.requests                         counter    {request}      rwlock.path
//	rwlock.waiting                          updown     {acquisition}  rwlock.path, rwlock.mode
//	rwlock.held                             updown     {grant}        rwlock.path, rwlock.mode
//	rwlock.wait.oldest                      gauge      s              rwlock.path
//
// rwlock.outcome is granted, would_block, cancelled or failed;
// rwlock.loss_cause is node_deleted, session_expired, lease_lapsed,
// disconnected, hold_limit, mixed_fleet (alert on it: peers on the path do
// not count this lock's nodes) or other. The wait histogram has every
// acquisition, by outcome (the stats package's has the granted ones); the
// wait and hold histograms' buckets run from 100 µs to an hour.
// rwlock.waiting counts the acquisitions in progress, rwlock.held the
// grants held now (of a node: see [rwlock.StartObserver]), and
// rwlock.wait.oldest is the age of the oldest acquisition in progress, 0
// when there is none: they show a wait while it lasts, where the others
// record it as it ends. [WithPathAttribute] drops or rewrites rwlock.path
// on the metrics, for programs with many lock paths.
//
// The spans (tracer of the same name) are named rwlock.Lock,
// rwlock.RLock, rwlock.TryLock, rwlock.TryRLock and, for an Election's
// Campaign, rwlock.Campaign. They are children of the
// span in the caller's context, run from the call to its return, and carry
// the same attributes plus rwlock.requests; a failed acquisition's span
// has the error status. A cancelled one's (its context ended: a deadline
// or a cancel the caller asked for) records the error as an event but
// keeps the status unset, so that a deliberate timeout is not counted as
// a failure.
//
// It is a module of its own, so that the lock itself does not depend on
// OpenTelemetry.
package otelrwlock

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/zkrwlock/rwlock"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/zkrwlock/rwlock/otelrwlock"

// The attribute keys.
const (
	KeyPath      = attribute.Key("rwlock.path")
	KeyMode      = attribute.Key("rwlock.mode")
	KeyOutcome   = attribute.Key("rwlock.outcome")
	KeyLossCause = attribute.Key("rwlock.loss_cause")
	KeyRequests  = attribute.Key("rwlock.requests")
)

// buckets are the wait and hold histograms' bounds, in seconds: from a
// round trip on a fast network to an hour, since a migration holds its
// lock for minutes and its waiters wait as long. (OpenTelemetry's default
// bounds, 0 to 10000, suit milliseconds, not seconds.)
var buckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
}

// An Observer records the events of the locks it is given to (see
// [rwlock.WithObserver]) as OpenTelemetry measurements and spans. One
// Observer serves any number of locks, concurrently.
type Observer struct {
	acquisitions metric.Int64Counter
	oneRoundTrip metric.Int64Counter
	relists      metric.Int64Counter
	wait         metric.Float64Histogram
	hold         metric.Float64Histogram
	lost         metric.Int64Counter
	requests     metric.Int64Counter
	waiting      metric.Int64UpDownCounter
	held         metric.Int64UpDownCounter
	tracer       trace.Tracer

	path  func(string) string // the rwlock.path of a lock's metrics; "" for none
	attrs sync.Map            // attrKey -> metric.MeasurementOption, made once per combination
	now   underWay
}

var _ rwlock.StartObserver = (*Observer)(nil)

// An Option configures an Observer.
type Option func(*config)

type config struct {
	mp   metric.MeterProvider
	tp   trace.TracerProvider
	path func(string) string
}

// WithMeterProvider sets where the metrics go; the default is the global
// MeterProvider ([otel.GetMeterProvider]).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithTracerProvider sets where the spans go; the default is the global
// TracerProvider ([otel.GetTracerProvider]). A no-op TracerProvider
// (go.opentelemetry.io/otel/trace/noop) turns them off.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithPathAttribute sets the value of the rwlock.path attribute of a
// lock's metrics: f(path), or none when f returns "". A path per tenant or
// per object makes a series per path, which a metrics backend may not
// afford: map such paths to their pattern (f returning
// "/locks/tenant/*/schema"), or drop the attribute (f returning ""), and
// the locks that map alike are counted together. Spans keep the path,
// each span being one acquisition anyway. The default keeps the path.
func WithPathAttribute(f func(path string) string) Option {
	return func(c *config) { c.path = f }
}

// NewObserver makes the instruments. It fails only if the MeterProvider
// refuses one.
func NewObserver(opts ...Option) (*Observer, error) {
	c := config{}
	for _, opt := range opts {
		opt(&c)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.path == nil {
		c.path = func(path string) string { return path }
	}
	m := c.mp.Meter(ScopeName)
	o := &Observer{tracer: c.tp.Tracer(ScopeName), path: c.path}
	var err, e error
	o.acquisitions, e = m.Int64Counter("rwlock.acquisitions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Lock acquisitions (Lock, RLock, TryLock, TryRLock and the helpers' own), by outcome."))
	err = first(err, e)
	o.oneRoundTrip, e = m.Int64Counter("rwlock.acquisitions.one_round_trip", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Grants that the first listing of the lock's queue proved, without waiting."))
	err = first(err, e)
	o.relists, e = m.Int64Counter("rwlock.relists", metric.WithUnit("{listing}"),
		metric.WithDescription("Listings an acquisition made after the one that first showed its node: round trips between a release and a grant."))
	err = first(err, e)
	o.wait, e = m.Float64Histogram("rwlock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from an acquisition's call to its return, by outcome."),
		metric.WithExplicitBucketBoundaries(buckets...))
	err = first(err, e)
	o.hold, e = m.Float64Histogram("rwlock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a grant was held, to its release, downgrade or loss."),
		metric.WithExplicitBucketBoundaries(buckets...))
	err = first(err, e)
	o.lost, e = m.Int64Counter("rwlock.grants.lost", metric.WithUnit("{grant}"),
		metric.WithDescription("Grants that ended without a release, by cause."))
	err = first(err, e)
	o.requests, e = m.Int64Counter("rwlock.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests sent to ZooKeeper by the lock's acquisitions and grants."))
	err = first(err, e)
	o.waiting, e = m.Int64UpDownCounter("rwlock.waiting", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Acquisitions in progress."))
	err = first(err, e)
	o.held, e = m.Int64UpDownCounter("rwlock.held", metric.WithUnit("{grant}"),
		metric.WithDescription("Grants held, of a node."))
	err = first(err, e)
	_, e = m.Float64ObservableGauge("rwlock.wait.oldest", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest acquisition in progress; 0 when none is."),
		metric.WithFloat64Callback(o.observeOldest))
	err = first(err, e)
	if err != nil {
		return nil, err
	}
	return o, nil
}

func first(err, e error) error {
	if err != nil {
		return err
	}
	return e
}

// ObserveAcquireStart counts an acquisition as waiting, until its
// ObserveAcquire.
func (o *Observer) ObserveAcquireStart(ctx context.Context, e rwlock.AcquireEvent) {
	o.now.begin(o.path(e.Lock), e)
	o.waiting.Add(ctx, 1, o.attributes(attrKey{lock: e.Lock, mode: e.Mode, kind: byMode}))
}

// ObserveGrantStart counts a grant as held, until its ObserveGrant.
func (o *Observer) ObserveGrantStart(e rwlock.GrantEvent) {
	if o.now.hold(e.Node) {
		o.held.Add(context.Background(), 1, o.attributes(attrKey{lock: e.Lock, mode: e.Mode, kind: byMode}))
	}
}

// ObserveAcquire records one acquisition, and its span.
func (o *Observer) ObserveAcquire(ctx context.Context, e rwlock.AcquireEvent) {
	if o.now.end(o.path(e.Lock), e) {
		o.waiting.Add(ctx, -1, o.attributes(attrKey{lock: e.Lock, mode: e.Mode, kind: byMode}))
	}
	withOutcome := o.attributes(attrKey{lock: e.Lock, mode: e.Mode, outcome: e.Outcome, kind: byOutcome})
	o.acquisitions.Add(ctx, 1, withOutcome)
	o.wait.Record(ctx, e.Wait.Seconds(), withOutcome)
	if e.OneRoundTrip {
		o.oneRoundTrip.Add(ctx, 1, o.attributes(attrKey{lock: e.Lock, mode: e.Mode, kind: byMode}))
	}
	if e.Relists > 0 {
		o.relists.Add(ctx, int64(e.Relists), o.attributes(attrKey{lock: e.Lock, mode: e.Mode, kind: byMode}))
	}
	if e.Requests > 0 {
		o.requests.Add(ctx, int64(e.Requests), o.attributes(attrKey{lock: e.Lock, kind: byLock}))
	}
	o.span(ctx, e)
}

// span records the wait as a span, after the fact: it starts and ends at
// the times the event gives, so the acquisition pays nothing for it while
// it runs. With the no-op TracerProvider (the global one until a program
// sets one), it costs a call that returns a span that records nothing.
func (o *Observer) span(ctx context.Context, e rwlock.AcquireEvent) {
	_, span := o.tracer.Start(ctx, spanName(e), trace.WithTimestamp(e.Start), trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(
			KeyPath.String(e.Lock), KeyMode.String(e.Mode.String()),
			KeyOutcome.String(e.Outcome), KeyRequests.Int(e.Requests),
		)
		switch e.Outcome {
		case "failed":
			span.RecordError(e.Err)
			span.SetStatus(codes.Error, e.Outcome)
		case "cancelled": // the caller's deadline or cancel: no failure of the lock's
			span.RecordError(e.Err)
		}
	}
	span.End(trace.WithTimestamp(e.Start.Add(e.Wait)))
}

func spanName(e rwlock.AcquireEvent) string {
	switch {
	case e.Campaign:
		return "rwlock.Campaign"
	case e.Try && e.Mode == rwlock.Read:
		return "rwlock.TryRLock"
	case e.Try:
		return "rwlock.TryLock"
	case e.Mode == rwlock.Read:
		return "rwlock.RLock"
	}
	return "rwlock.Lock"
}

// ObserveGrant records the end of a grant: its hold, its loss, its requests.
func (o *Observer) ObserveGrant(e rwlock.GrantEvent) {
	ctx := context.Background()
	if o.now.release(e.Node) {
		o.held.Add(ctx, -1, o.attributes(attrKey{lock: e.Lock, mode: e.Mode, kind: byMode}))
	}
	o.hold.Record(ctx, e.Hold.Seconds(), o.attributes(attrKey{lock: e.Lock, mode: e.Mode, kind: byMode}))
	if e.Loss != "" {
		o.lost.Add(ctx, 1, o.attributes(attrKey{lock: e.Lock, mode: e.Mode, loss: e.Loss, kind: byLoss}))
	}
	if e.Requests > 0 {
		o.requests.Add(ctx, int64(e.Requests), o.attributes(attrKey{lock: e.Lock, kind: byLock}))
	}
}

type attrKind int8

const (
	byLock attrKind = iota
	byMode
	byOutcome
	byLoss
)

type attrKey struct {
	lock    string
	mode    rwlock.Mode
	outcome string
	loss    string
	kind    attrKind
}

// attributes returns the measurement option with k's attributes. A lock
// has a handful of combinations, so each is made once: making an
// attribute set for every measurement would allocate on every acquisition.
func (o *Observer) attributes(k attrKey) metric.MeasurementOption {
	if opt, ok := o.attrs.Load(k); ok {
		return opt.(metric.MeasurementOption)
	}
	var kvs []attribute.KeyValue
	if p := o.path(k.lock); p != "" {
		kvs = append(kvs, KeyPath.String(p))
	}
	if k.kind != byLock {
		kvs = append(kvs, KeyMode.String(k.mode.String()))
	}
	switch k.kind {
	case byOutcome:
		kvs = append(kvs, KeyOutcome.String(k.outcome))
	case byLoss:
		kvs = append(kvs, KeyLossCause.String(k.loss))
	}
	opt, _ := o.attrs.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kvs...)))
	return opt.(metric.MeasurementOption)
}

// observeOldest reports the age of the oldest wait in progress, by
// rwlock.path, and 0 for the paths that have none now.
func (o *Observer) observeOldest(_ context.Context, obs metric.Float64Observer) error {
	for path, age := range o.now.oldest(time.Now()) {
		if path == "" {
			obs.Observe(age.Seconds())
			continue
		}
		obs.Observe(age.Seconds(), metric.WithAttributeSet(attribute.NewSet(KeyPath.String(path))))
	}
	return nil
}

// underWay is what is under way: the waits and the grants begun and not
// yet ended. An end is counted only if its start was, so that an Observer
// wrapped in one that passes on only the ends (an rwlock.Observer) leaves
// the up-down counters at 0 rather than below it.
type underWay struct {
	mu     sync.Mutex
	waits  map[wait]int        // by start; starts of one lock and mode may coincide
	paths  map[string]struct{} // every rwlock.path value that has waited, for the gauge's 0
	grants map[string]struct{} // by node
}

type wait struct {
	path  string // the rwlock.path value
	lock  string
	mode  rwlock.Mode
	start time.Time // the event's own value, so == matches it
}

func (u *underWay) begin(path string, e rwlock.AcquireEvent) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.waits == nil {
		u.waits, u.paths = map[wait]int{}, map[string]struct{}{}
	}
	u.waits[wait{path, e.Lock, e.Mode, e.Start}]++
	u.paths[path] = struct{}{}
}

// end reports whether e's start was heard.
func (u *underWay) end(path string, e rwlock.AcquireEvent) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	w := wait{path, e.Lock, e.Mode, e.Start}
	switch n := u.waits[w]; n {
	case 0:
		return false
	case 1:
		delete(u.waits, w)
	default:
		u.waits[w] = n - 1
	}
	return true
}

// hold reports whether node was not held yet.
func (u *underWay) hold(node string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.grants[node]; ok {
		return false
	}
	if u.grants == nil {
		u.grants = map[string]struct{}{}
	}
	u.grants[node] = struct{}{}
	return true
}

// release reports whether node was held.
func (u *underWay) release(node string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.grants[node]; !ok {
		return false
	}
	delete(u.grants, node)
	return true
}

// oldest returns the age of each path's oldest wait at now.
func (u *underWay) oldest(now time.Time) map[string]time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	ages := make(map[string]time.Duration, len(u.paths))
	for p := range u.paths {
		ages[p] = 0
	}
	for w := range u.waits {
		ages[w.path] = max(ages[w.path], now.Sub(w.start))
	}
	return ages
}
