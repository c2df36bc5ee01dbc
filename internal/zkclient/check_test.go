package zkclient

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// asker answers Check's question as told, counting the times it is asked;
// each answer waits for gate to close when gate is not nil.
type asker struct {
	asked atomic.Int32
	gate  chan struct{}
	yes   bool
	err   error
}

func (a *asker) ask() (bool, error) {
	a.asked.Add(1)
	if a.gate != nil {
		<-a.gate
	}
	return a.yes, a.err
}

func TestCheckRemembersAYes(t *testing.T) {
	var c Client
	a := &asker{yes: true}
	for range 3 {
		yes, err := c.Check(context.Background(), "/p", a.ask)
		require.NoError(t, err)
		assert.True(t, yes)
	}
	assert.Equal(t, int32(1), a.asked.Load())
	yes, _ := c.Check(context.Background(), "/q", a.ask)
	assert.True(t, yes)
	assert.Equal(t, int32(2), a.asked.Load(), "another path is another question")
	c.Forget("/p")
	_, _ = c.Check(context.Background(), "/p", a.ask)
	assert.Equal(t, int32(3), a.asked.Load(), "asked again after Forget")
}

func TestCheckForgetsANo(t *testing.T) {
	var c Client
	refused := errors.New("refused")
	a := &asker{err: refused}
	for range 2 {
		yes, err := c.Check(context.Background(), "/p", a.ask)
		assert.False(t, yes)
		assert.ErrorIs(t, err, refused)
	}
	assert.Equal(t, int32(2), a.asked.Load())
}

// Callers that come while a check is under way take its answer, a no
// included, but ask themselves when the asker's context ended.
func TestCheckShared(t *testing.T) {
	for _, tc := range []struct {
		name  string
		yes   bool
		err   error
		asked int32
	}{
		{"yes", true, nil, 1},
		{"no", false, errors.New("refused"), 1},
		{"asker gone", false, context.Canceled, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var c Client
				first := &asker{gate: make(chan struct{}), yes: tc.yes, err: tc.err}
				done := make(chan struct{})
				go func() {
					defer close(done)
					_, _ = c.Check(t.Context(), "/p", first.ask)
				}()
				synctest.Wait()
				waiter := &asker{yes: true}
				answer := make(chan bool, 1)
				go func() {
					yes, _ := c.Check(t.Context(), "/p", func() (bool, error) {
						first.asked.Add(1)
						return waiter.ask()
					})
					answer <- yes
				}()
				synctest.Wait()
				close(first.gate)
				<-done
				assert.Equal(t, tc.yes || tc.asked == 2, <-answer)
				assert.Equal(t, tc.asked, first.asked.Load())
			})
		})
	}
}

// A check that began before Forget is not remembered: it may be about what
// was at the path before.
func TestCheckBeforeForgetIsNotRemembered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Client
		stale := &asker{gate: make(chan struct{}), yes: true}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = c.Check(t.Context(), "/p", stale.ask)
		}()
		synctest.Wait()
		c.Forget("/p")
		close(stale.gate)
		<-done
		fresh := &asker{yes: true}
		_, _ = c.Check(t.Context(), "/p", fresh.ask)
		assert.Equal(t, int32(1), fresh.asked.Load())
	})
}

// A caller waiting for another's check stops when its own context ends.
func TestCheckWaitEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Client
		first := &asker{gate: make(chan struct{}), yes: true}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = c.Check(t.Context(), "/p", first.ask)
		}()
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := c.Check(ctx, "/p", first.ask)
		require.ErrorIs(t, err, context.Canceled)
		close(first.gate)
		<-done
		assert.Equal(t, int32(1), first.asked.Load())
	})
}
