//go:build !race

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

// A chaos client is the test binary run again (TestHelperChaosClient): one
// process, one connection made by rwlock.Dial through its own proxies, one
// lock path. It takes the lock again and again, read or write, and holds
// it for a while taking steps: before each it notes the time, then asks
// Err; a step is reported only if Err said the grant is held. Now and
// then a step is a nested grant instead, or a write grant is downgraded.
// It prints every event on stdout and stops when its stdin closes,
// releasing what it holds.
const (
	chaosEnv        = "ZKRWLOCK_CHAOS_CLIENT"
	chaosEnvServers = "ZKRWLOCK_CHAOS_SERVERS" // comma-separated proxy addresses
	chaosEnvPath    = "ZKRWLOCK_CHAOS_PATH"
	chaosEnvTimeout = "ZKRWLOCK_CHAOS_TIMEOUT"
	chaosEnvSeed    = "ZKRWLOCK_CHAOS_SEED"
)

func TestHelperChaosClient(t *testing.T) {
	if os.Getenv(chaosEnv) == "" {
		return
	}
	id, _ := strconv.Atoi(os.Getenv(chaosEnv))
	seed, _ := strconv.ParseUint(os.Getenv(chaosEnvSeed), 10, 64)
	timeout, err := time.ParseDuration(os.Getenv(chaosEnvTimeout))
	c := &chaosClient{id: id, rng: rand.New(rand.NewPCG(seed, uint64(id))), out: bufio.NewWriter(os.Stdout)}
	if err != nil {
		c.fail(err)
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
	l, err := rwlock.New(conn, os.Getenv(chaosEnvPath))
	if err != nil {
		c.fail(err)
	}
	c.print("ready")
	for ctx.Err() == nil {
		c.round(ctx, l)
	}
	conn.Close()
	c.out.Flush()
	os.Exit(0) // not return: TestMain would count go-zookeeper's goroutines as leaks
}

type chaosClient struct {
	id  int
	rng *rand.Rand
	mu  sync.Mutex
	out *bufio.Writer
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

func (c *chaosClient) event(e chaosEvent) {
	e.Client = c.id
	if e.At == 0 {
		e.At = time.Now().UnixNano()
	}
	b, _ := json.Marshal(e)
	c.print("event " + string(b))
}

// round takes the lock once, holds it, and lets it go.
func (c *chaosClient) round(ctx context.Context, l *rwlock.RWLock) {
	write := c.rng.IntN(3) == 0
	c.event(chaosEvent{Kind: "waiting"})
	actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	var g *rwlock.Grant
	var err error
	if write {
		g, err = l.Lock(actx)
	} else {
		g, err = l.RLock(actx)
	}
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			c.print("error " + err.Error()) // a failed acquisition is no violation, but worth seeing
			sleepCtx(ctx, 50*time.Millisecond)
		}
		return
	}
	c.event(chaosEvent{Kind: "granted", Mode: g.Mode().String(), Node: nodeName(g.Node())})
	hold := time.Duration(20+c.rng.IntN(400)) * time.Millisecond
	if c.rng.IntN(20) == 0 {
		hold = time.Duration(1+c.rng.IntN(4)) * time.Second
	}
	until := time.Now().Add(hold)
	for time.Now().Before(until) && ctx.Err() == nil {
		var held bool
		if g, held = c.step(ctx, l, g); !held {
			return // lost: reported
		}
		sleepCtx(ctx, time.Duration(2+c.rng.IntN(15))*time.Millisecond)
	}
	c.event(chaosEvent{Kind: "released"})
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	g.Release(rctx) // an error is the background deletion's business
	rcancel()
}

// step takes one step under g: a plain one, a nested grant or a
// downgrade. It returns the grant held next, and false once g is lost
// (reported).
func (c *chaosClient) step(ctx context.Context, l *rwlock.RWLock, g *rwlock.Grant) (*rwlock.Grant, bool) {
	at := time.Now().UnixNano()
	switch n := c.rng.IntN(40); {
	case n == 0 && g.Mode() == rwlock.Write:
		d, err := g.Downgrade(ctx)
		if err != nil {
			return g, c.lost(g, err)
		}
		// Readers may join once the mark is written: the time is before
		// asking.
		c.event(chaosEvent{Kind: "downgraded", At: at})
		return d, true
	case n < 4:
		inner := rwlock.ContextWithGrant(ctx, g)
		var ng *rwlock.Grant
		var err error
		if g.Mode() == rwlock.Write && n%2 == 0 {
			ng, err = l.Lock(inner)
		} else {
			ng, err = l.RLock(inner)
		}
		if err != nil {
			return g, c.lost(g, err)
		}
		c.event(chaosEvent{Kind: "nested", At: at, Done: time.Now().UnixNano()})
		ng.Release(ctx)
		return g, true
	}
	if err := g.Err(); err != nil {
		return g, c.lost(g, err)
	}
	c.event(chaosEvent{Kind: "step", At: at, Done: time.Now().UnixNano()})
	return g, true
}

// lost reports a loss and returns false; an error that is not one (a
// downgrade the server refused) is printed, and the grant goes on.
func (c *chaosClient) lost(g *rwlock.Grant, err error) bool {
	if !errors.Is(err, rwlock.ErrLost) && g.Err() == nil {
		c.print("error " + err.Error())
		return true
	}
	c.event(chaosEvent{Kind: "lost", Cause: err.Error()})
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
