package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock"
)

// A chaos client is the test binary run again (TestHelperChaosClient), or
// the same tests built with the race detector: one process, one connection
// made by rwlock.Dial through its own proxies, two lock paths, a (the chaos
// lock) and b. Its main goroutine takes locks again and again: a alone or
// b alone, read or write, or both in one LockAll set in a random order and
// random modes, released with ReleaseAll, or a weight of the bounded lock c
// (chaosCapacity). A quarter of its rounds use
// handles with a hold limit, and some of those hold past it. A few holds
// outlast the session timeout, so that partitions and stops take grants.
// Some clients also run coalesced readers: goroutines that read a through
// one handle with WithReadCoalescing (in half of them under a hold limit
// too).
//
// Every goroutine holds what it took for a while taking steps: before each
// it notes the time, then asks Err of every grant it holds; a step is
// reported only if Err said held, and the last comes after the hold's end.
// Now and then a step is a nested grant instead, or a write grant is
// downgraded. Between steps a goroutine waits for its next step or for a
// grant's Done, so a hold limit's notice is reported as it comes. The
// client prints every event on stdout and stops when its stdin closes,
// releasing what it holds.
const (
	chaosEnv        = "ZKRWLOCK_CHAOS_CLIENT"
	chaosEnvServers = "ZKRWLOCK_CHAOS_SERVERS" // comma-separated proxy addresses
	chaosEnvPaths   = "ZKRWLOCK_CHAOS_PATHS"   // the paths of a and b, comma-separated
	chaosEnvTimeout = "ZKRWLOCK_CHAOS_TIMEOUT"
	chaosEnvSeed    = "ZKRWLOCK_CHAOS_SEED"
)

// chaosLockNames name the two locks in events.
var chaosLockNames = [2]string{"a", "b"}

// The hold limits a client may pick: some shorter than the longest holds,
// and with notices before and after a quarter of the session timeout.
var chaosLimits = []time.Duration{time.Second, 1500 * time.Millisecond, 3 * time.Second}

// chaosCoalescedReaders is how many coalesced readers a client that runs
// them has.
const chaosCoalescedReaders = 3

// chaosCapacity is the capacity of the bounded lock c, on a's path with
// -c appended (chaosPermitsPath), which a quarter of the rounds take with a
// weight of their own.
const chaosCapacity = 4

func chaosPermitsPath(a string) string { return a + "-c" }

func TestHelperChaosClient(t *testing.T) {
	if os.Getenv(chaosEnv) == "" {
		return
	}
	id, _ := strconv.Atoi(os.Getenv(chaosEnv))
	seed, _ := strconv.ParseUint(os.Getenv(chaosEnvSeed), 10, 64)
	c := &chaosClient{id: id, seed: seed, out: bufio.NewWriter(os.Stdout)}
	timeout, err := time.ParseDuration(os.Getenv(chaosEnvTimeout))
	if err != nil {
		c.fail(err)
	}
	c.timeout = timeout
	paths := strings.Split(os.Getenv(chaosEnvPaths), ",")
	if len(paths) != 2 {
		c.fail(fmt.Errorf("%s=%q: want two paths", chaosEnvPaths, os.Getenv(chaosEnvPaths)))
	}
	ctx, stop := context.WithCancel(context.Background())
	go func() { // the parent closes our stdin to stop us
		bufio.NewReader(os.Stdin).ReadString('\n')
		stop()
	}()
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	conn, err := rwlock.Dial(dctx, strings.Split(os.Getenv(chaosEnvServers), ","), timeout, zk.WithLogger(quietZK{}), zk.WithLogInfo(false))
	cancel()
	if err != nil {
		c.fail(err)
	}
	rng := c.rng(255)
	c.limit = chaosLimits[rng.IntN(len(chaosLimits))]
	readers := 0
	if rng.IntN(2) == 0 {
		readers = chaosCoalescedReaders
		if rng.IntN(2) == 0 {
			c.sharedLimit = c.limit
		}
	}
	for i, p := range paths {
		c.plain[i] = c.newLock(conn, p)
		c.limited[i] = c.newLock(conn, p, rwlock.WithMaxHold(c.limit))
	}
	shared := []rwlock.Option{rwlock.WithReadCoalescing()}
	if c.sharedLimit > 0 {
		shared = append(shared, rwlock.WithMaxHold(c.sharedLimit))
	}
	c.shared = c.newLock(conn, paths[0], shared...)
	elect := c.newCampaigner(conn, paths[0]) // chaos_elect_test.go
	c.permits = c.newLock(conn, chaosPermitsPath(paths[0]), rwlock.WithCapacity(chaosCapacity))
	c.print("ready")
	var wg sync.WaitGroup
	wg.Go(func() {
		w := c.worker(0)
		for ctx.Err() == nil {
			w.round(ctx)
		}
	})
	for i := range readers {
		wg.Go(func() {
			w := c.worker(1 + i)
			for ctx.Err() == nil {
				w.readRound(ctx)
			}
		})
	}
	if elect != nil {
		wg.Go(func() {
			w := c.worker(chaosCampaigner)
			for ctx.Err() == nil {
				w.campaignRound(ctx, elect)
			}
		})
	}
	wg.Wait()
	conn.Close()
	c.out.Flush()
	os.Exit(0) // not return: TestMain would count go-zookeeper's goroutines as leaks
}

type chaosClient struct {
	id      int
	seed    uint64
	timeout time.Duration // the session timeout asked for

	plain, limited [2]*rwlock.RWLock // a and b, without and with a hold limit
	limit          time.Duration     // the limited handles' hold limit
	shared         *rwlock.RWLock    // a, coalescing its readers
	sharedLimit    time.Duration     // shared's hold limit; 0 for none
	permits        *rwlock.RWLock    // the bounded lock c

	mu  sync.Mutex // guards out
	out *bufio.Writer
}

func (c *chaosClient) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(c.seed, uint64(c.id)<<8|stream))
}

func (c *chaosClient) newLock(conn *zk.Conn, path string, opts ...rwlock.Option) *rwlock.RWLock {
	l, err := rwlock.New(conn, path, opts...)
	if err != nil {
		c.fail(err)
	}
	return l
}

func (c *chaosClient) fail(err error) {
	fmt.Fprintf(os.Stderr, "chaos client %d: %v\n", c.id, err)
	os.Exit(2)
}

func (c *chaosClient) print(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out.WriteString(line + "\n")
	c.out.Flush()
}

// chaosWorker is one goroutine of a client, with its own random stream.
type chaosWorker struct {
	c   *chaosClient
	id  int
	rng *rand.Rand
}

func (c *chaosClient) worker(id int) *chaosWorker {
	return &chaosWorker{c: c, id: id, rng: c.rng(uint64(id))}
}

func (w *chaosWorker) event(e chaosEvent) {
	e.Client, e.Worker = w.c.id, w.id
	if e.At == 0 {
		e.At = time.Now().UnixNano()
	}
	b, _ := json.Marshal(e)
	w.c.print("event " + string(b))
}

// chaosHeld is one grant a worker holds, and the handle it came from.
type chaosHeld struct {
	lock string // a or b
	l    *rwlock.RWLock
	g    *rwlock.Grant
	lost bool
}

// round takes a, b or both once, holds them, and lets them go.
func (w *chaosWorker) round(ctx context.Context) {
	locks, limit := w.c.plain, time.Duration(0)
	if w.rng.IntN(4) == 0 {
		locks, limit = w.c.limited, w.c.limit
	}
	mode := func() rwlock.Mode {
		if w.rng.IntN(3) == 0 {
			return rwlock.Write
		}
		return rwlock.Read
	}
	var reqs []rwlock.Request
	var names []string
	switch n := w.rng.IntN(8); {
	case n == 3 || n == 4:
		w.permitRound(ctx)
		return
	case n < 2: // a set, in a random order
		for _, i := range w.rng.Perm(2) {
			reqs = append(reqs, rwlock.Request{Lock: locks[i], Mode: mode()})
			names = append(names, chaosLockNames[i])
		}
	case n == 2:
		reqs, names = []rwlock.Request{{Lock: locks[1], Mode: mode()}}, chaosLockNames[1:]
	default:
		reqs, names = []rwlock.Request{{Lock: locks[0], Mode: mode()}}, chaosLockNames[:1]
	}
	w.event(chaosEvent{Kind: "waiting"})
	actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	var grants []*rwlock.Grant
	var err error
	switch {
	case len(reqs) > 1:
		grants, err = rwlock.LockAll(actx, reqs...)
	case reqs[0].Mode == rwlock.Write:
		var g *rwlock.Grant
		g, err = reqs[0].Lock.Lock(actx)
		grants = []*rwlock.Grant{g}
	default:
		var g *rwlock.Grant
		g, err = reqs[0].Lock.RLock(actx)
		grants = []*rwlock.Grant{g}
	}
	cancel()
	if err != nil {
		w.failed(ctx, err)
		return
	}
	set := 0
	if len(grants) > 1 {
		set = len(grants)
	}
	until := time.Now().Add(w.holdFor(limit))
	held := make([]*chaosHeld, len(grants))
	for i, g := range grants {
		held[i] = &chaosHeld{lock: names[i], l: reqs[i].Lock, g: g}
		w.event(chaosEvent{Kind: "granted", Lock: names[i], Mode: g.Mode().String(), Node: nodeName(g.Node()),
			Set: set, Limit: int64(limit), Until: until.UnixNano()})
	}
	w.hold(ctx, held, until)
}

// permitRound takes a weight of the bounded lock c once, holds it, and
// lets it go.
func (w *chaosWorker) permitRound(ctx context.Context) {
	weight := 1 + w.rng.Int64N(chaosCapacity)
	w.event(chaosEvent{Kind: "waiting"})
	actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	g, err := w.c.permits.Acquire(actx, weight)
	cancel()
	if err != nil {
		w.failed(ctx, err)
		return
	}
	until := time.Now().Add(w.holdFor(0))
	w.event(chaosEvent{Kind: "granted", Lock: "c", Mode: g.Mode().String(), Node: nodeName(g.Node()),
		Weight: weight, Until: until.UnixNano()})
	w.hold(ctx, []*chaosHeld{{lock: "c", l: w.c.permits, g: g}}, until)
}

// readRound takes a shared grant of a through the coalescing handle once,
// holds it, and lets it go.
func (w *chaosWorker) readRound(ctx context.Context) {
	w.event(chaosEvent{Kind: "waiting"})
	actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	g, err := w.c.shared.RLock(actx)
	cancel()
	if err != nil {
		w.failed(ctx, err)
		return
	}
	until := time.Now().Add(w.holdFor(w.c.sharedLimit))
	w.event(chaosEvent{Kind: "granted", Lock: chaosLockNames[0], Mode: g.Mode().String(), Node: nodeName(g.Node()),
		Limit: int64(w.c.sharedLimit), Shared: true, Until: until.UnixNano()})
	w.hold(ctx, []*chaosHeld{{lock: chaosLockNames[0], l: w.c.shared, g: g}}, until)
}

// failed reports a failed acquisition: no violation, but worth seeing.
func (w *chaosWorker) failed(ctx context.Context, err error) {
	if ctx.Err() == nil {
		w.c.print(fmt.Sprintf("error c%d.%d: %v", w.c.id, w.id, err))
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// holdFor picks how long to hold: mostly briefly; now and then from a
// second to past the session timeout, so that a partition can take the
// grant from its holder; under a hold limit often up to twice the limit.
func (w *chaosWorker) holdFor(limit time.Duration) time.Duration {
	switch {
	case limit > 0 && w.rng.IntN(3) == 0:
		return time.Duration(w.rng.Int64N(int64(2 * limit)))
	case w.rng.IntN(12) == 0:
		return time.Second + time.Duration(w.rng.Int64N(int64(w.c.timeout)))
	}
	return time.Duration(20+w.rng.IntN(400)) * time.Millisecond
}

// hold takes steps under held until then, or until a grant is lost, then
// releases them all. The last step comes after the hold's end, as the
// holder's last use of its grants: a hold that ended while the process
// was stopped still looks at its grants once as it resumes.
func (w *chaosWorker) hold(ctx context.Context, held []*chaosHeld, until time.Time) {
	for ctx.Err() == nil && w.step(ctx, held) && time.Now().Before(until) {
		w.pause(ctx, time.Duration(2+w.rng.IntN(15))*time.Millisecond, held)
	}
	var grants []*rwlock.Grant
	for _, h := range held {
		if !h.lost {
			w.event(chaosEvent{Kind: "released", Lock: h.lock})
		}
		grants = append(grants, h.g)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	rwlock.ReleaseAll(rctx, grants...) // an error is the background deletion's business
	rcancel()
}

// pause waits d, or until ctx ends or a grant of held ends.
func (w *chaosWorker) pause(ctx context.Context, d time.Duration, held []*chaosHeld) {
	t := time.NewTimer(d)
	defer t.Stop()
	var done [2]<-chan struct{} // a nil channel never fires
	for i, h := range held {
		done[i] = h.g.Done()
	}
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-done[0]:
	case <-done[1]:
	}
}

// step takes one step under held: a plain one, asking every grant's Err; a
// nested grant of one of them; or a downgrade of one. It returns false once
// a grant is lost (reported).
func (w *chaosWorker) step(ctx context.Context, held []*chaosHeld) bool {
	at := time.Now().UnixNano()
	h := held[w.rng.IntN(len(held))]
	switch n := w.rng.IntN(40); {
	case n == 0 && h.g.Mode() == rwlock.Write && h.lock != "c": // a permit's weight is fixed
		d, err := h.g.Downgrade(ctx)
		if err != nil {
			return w.lost(h, err)
		}
		// Readers may join once the mark is written: the time is before
		// asking.
		w.event(chaosEvent{Kind: "downgraded", Lock: h.lock, At: at})
		h.g = d
		return true
	case n < 4:
		inner := rwlock.ContextWithGrant(ctx, h.g)
		var ng *rwlock.Grant
		var err error
		if h.g.Mode() == rwlock.Write && n%2 == 0 {
			ng, err = h.l.Lock(inner)
		} else {
			ng, err = h.l.RLock(inner)
		}
		if err != nil {
			return w.lost(h, err)
		}
		w.event(chaosEvent{Kind: "nested", Lock: h.lock, At: at, Done: time.Now().UnixNano()})
		ng.Release(ctx)
		return true
	}
	for _, h := range held {
		if err := h.g.Err(); err != nil {
			return w.lost(h, err)
		}
	}
	done := time.Now().UnixNano()
	for _, h := range held {
		w.event(chaosEvent{Kind: "step", Lock: h.lock, At: at, Done: done})
	}
	return true
}

// lost reports a loss and returns false; an error that is not one (a
// downgrade the server refused) is printed, and the grant goes on.
func (w *chaosWorker) lost(h *chaosHeld, err error) bool {
	if !errors.Is(err, rwlock.ErrLost) && h.g.Err() == nil {
		w.c.print(fmt.Sprintf("error c%d.%d: %v", w.c.id, w.id, err))
		return true
	}
	h.lost = true
	w.event(chaosEvent{Kind: "lost", Lock: h.lock, Cause: err.Error()})
	return false
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
