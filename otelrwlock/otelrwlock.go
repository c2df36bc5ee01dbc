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
//	rwlock.wait.duration                    histogram  s              rwlock.path, rwlock.mode, rwlock.outcome
//	rwlock.hold.duration                    histogram  s              rwlock.path, rwlock.mode
//	rwlock.grants.lost                      counter    {grant}        rwlock.path, rwlock.mode, rwlock.loss_cause
//	rwlock.requests                         counter    {request}      rwlock.path
//
// rwlock.outcome is granted, would_block, cancelled or failed;
// rwlock.loss_cause is node_deleted, session_expired, lease_lapsed,
// disconnected, hold_limit or other. The wait histogram has every
// acquisition, by outcome (the stats package's has the granted ones); its
// buckets run from 100 µs to 60 s. The spans (tracer of the same name) are named rwlock.Lock,
// rwlock.RLock, rwlock.TryLock and rwlock.TryRLock, are children of the
// span in the caller's context, run from the call to its return, and carry
// the same attributes plus rwlock.requests; a failed or cancelled
// acquisition's span has the error status.
//
// It is a module of its own, so that the lock itself does not depend on
// OpenTelemetry.
package otelrwlock

import (
	"context"
	"sync"

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

// waitBuckets are the wait histogram's bounds, in seconds: from a round
// trip on a fast network to a minute's queue. (OpenTelemetry's default
// bounds, 0 to 10000, suit milliseconds, not seconds.)
var waitBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// holdBuckets reach further: a migration holds its lock for minutes.
var holdBuckets = append(waitBuckets[:len(waitBuckets):len(waitBuckets)], 300, 900, 3600)

// An Observer records the events of the locks it is given to (see
// [rwlock.WithObserver]) as OpenTelemetry measurements and spans. One
// Observer serves any number of locks, concurrently.
type Observer struct {
	acquisitions metric.Int64Counter
	oneRoundTrip metric.Int64Counter
	wait         metric.Float64Histogram
	hold         metric.Float64Histogram
	lost         metric.Int64Counter
	requests     metric.Int64Counter
	tracer       trace.Tracer

	attrs sync.Map // attrKey -> metric.MeasurementOption, made once per combination
}

var _ rwlock.Observer = (*Observer)(nil)

// An Option configures an Observer.
type Option func(*config)

type config struct {
	mp metric.MeterProvider
	tp trace.TracerProvider
}

// WithMeterProvider sets where the metrics go; the default is the global
// MeterProvider ([otel.GetMeterProvider]).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithTracerProvider sets where the spans go; the default is the global
// TracerProvider ([otel.GetTracerProvider]). A no-op TracerProvider
// (go.opentelemetry.io/otel/trace/noop) turns them off.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

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
	m := c.mp.Meter(ScopeName)
	o := &Observer{tracer: c.tp.Tracer(ScopeName)}
	var err, e error
	o.acquisitions, e = m.Int64Counter("rwlock.acquisitions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Lock acquisitions (Lock, RLock, TryLock, TryRLock and the helpers' own), by outcome."))
	err = first(err, e)
	o.oneRoundTrip, e = m.Int64Counter("rwlock.acquisitions.one_round_trip", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Grants that the first listing of the lock's queue proved, without waiting."))
	err = first(err, e)
	o.wait, e = m.Float64Histogram("rwlock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from an acquisition's call to its return, by outcome."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	err = first(err, e)
	o.hold, e = m.Float64Histogram("rwlock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a grant was held, to its release, downgrade or loss."),
		metric.WithExplicitBucketBoundaries(holdBuckets...))
	err = first(err, e)
	o.lost, e = m.Int64Counter("rwlock.grants.lost", metric.WithUnit("{grant}"),
		metric.WithDescription("Grants that ended without a release, by cause."))
	err = first(err, e)
	o.requests, e = m.Int64Counter("rwlock.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests sent to ZooKeeper by the lock's acquisitions and grants."))
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

// ObserveAcquire records one acquisition, and its span.
func (o *Observer) ObserveAcquire(ctx context.Context, e rwlock.AcquireEvent) {
	withOutcome := o.attributes(attrKey{lock: e.Lock, mode: e.Mode, outcome: e.Outcome, kind: byOutcome})
	o.acquisitions.Add(ctx, 1, withOutcome)
	o.wait.Record(ctx, e.Wait.Seconds(), withOutcome)
	if e.OneRoundTrip {
		o.oneRoundTrip.Add(ctx, 1, o.attributes(attrKey{lock: e.Lock, mode: e.Mode, kind: byMode}))
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
		if e.Outcome == "failed" || e.Outcome == "cancelled" {
			span.RecordError(e.Err)
			span.SetStatus(codes.Error, e.Outcome)
		}
	}
	span.End(trace.WithTimestamp(e.Start.Add(e.Wait)))
}

func spanName(e rwlock.AcquireEvent) string {
	switch {
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
	kvs := []attribute.KeyValue{KeyPath.String(k.lock)}
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
