package zkclient

import (
	"context"
	"errors"
)

// A check is one asking of a yes-or-no question about what the
// connection may do at a path. "May it delete there?" is one such
// question. Its answer is set once done is closed.
type check struct {
	done chan struct{}
	yes  bool
	err  error
}

// Check answers a question about what the connection may do at path. It
// answers as ask does, which sends the request that tells. Its users ask
// the same question of the same path. So a yes is remembered for as long
// as c lives, until Forget. Callers that come while the question is being
// asked wait for its answer instead of asking too, or until ctx ends.
//
// A no or an error is not remembered, and the next caller asks again.
// What the connection may do can change, as after (*zk.Conn).AddAuth. The
// callers that waited share a no or an error. But they ask again
// themselves when the asker's context ended first.
func (c *Client) Check(ctx context.Context, path string, ask func() (bool, error)) (bool, error) {
	for {
		c.mu.Lock()
		ch := c.checks[path]
		if ch == nil {
			ch = &check{done: make(chan struct{})}
			if c.checks == nil {
				c.checks = make(map[string]*check)
			}
			c.checks[path] = ch
			c.mu.Unlock()
			return c.ask(path, ch, ask)
		}
		c.mu.Unlock()
		select {
		case <-ch.done:
			if !errors.Is(ch.err, context.Canceled) && !errors.Is(ch.err, context.DeadlineExceeded) {
				return ch.yes, ch.err
			}
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

func (c *Client) ask(path string, ch *check, ask func() (bool, error)) (bool, error) {
	yes, err := ask()
	c.mu.Lock()
	ch.yes, ch.err = yes, err
	// A check made before Forget finds that the entry is no longer ch.
	// It is not remembered either, since it may be about what was at path
	// before.
	if !yes && c.checks[path] == ch {
		delete(c.checks, path)
	}
	c.mu.Unlock()
	close(ch.done)
	return yes, err
}

// Forget forgets what Check found at path, and the check under way
// there. The next caller asks again.
func (c *Client) Forget(path string) {
	c.mu.Lock()
	delete(c.checks, path)
	c.mu.Unlock()
}
