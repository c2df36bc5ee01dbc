package rwlock

import (
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// probes counts the DELETE checks c sent in dir (see checkDeletable).
func (c *fakeConn) probes() int {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	n := 0
	for _, op := range c.applied {
		if strings.HasPrefix(op, "delete "+dir+"/zkrwlock-acl-check-") {
			n++
		}
	}
	return n
}

// makeDir makes the lock directory, from a connection of its own.
func makeDir(t *testing.T, s *fakeServer) {
	t.Helper()
	g, err := newLock(t, s.conn()).Lock(t.Context())
	require.NoError(t, err)
	require.NoError(t, g.Release(t.Context()))
}

func releaseAll(t *testing.T, gs ...*Grant) {
	t.Helper()
	for _, g := range gs {
		require.NoError(t, g.Release(t.Context()))
	}
}

// The DELETE check is made once per lock directory and connection, not
// once per RWLock: many RWLocks on one connection cost one request.
func TestDeleteCheckOncePerConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		makeDir(t, s)
		ctx := t.Context()
		c, d := s.conn(), s.conn()
		var held []*Grant // the connection's client lives on while they do
		for _, conn := range []*fakeConn{c, c, d, d} {
			g, err := newLock(t, conn).RLock(ctx)
			require.NoError(t, err)
			held = append(held, g)
		}
		assert.Equal(t, 1, c.probes(), "two RWLocks on one connection")
		assert.Equal(t, 1, d.probes(), "and on another")
		releaseAll(t, held...)
	})
}

// RWLocks that start at once on one connection wait for the check under
// way rather than send one each.
func TestDeleteCheckShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		makeDir(t, s)
		ctx := t.Context()
		c := s.conn()
		answer := make(chan struct{})
		c.setBefore(func(op, p string) error {
			if op == "delete" && strings.HasPrefix(p, dir+"/zkrwlock-acl-check-") {
				<-answer
			}
			return nil
		})
		var waits []<-chan result
		for range 3 {
			waits = append(waits, start(ctx, newLock(t, c).RLock))
		}
		synctest.Wait() // one check sent, the others waiting for it
		close(answer)
		synctest.Wait()
		for _, w := range waits {
			releaseAll(t, granted(t, w))
		}
		assert.Equal(t, 1, c.probes())
	})
}

// A refusal is not remembered: once the client may delete (AddAuth), the
// next acquisition, of any RWLock on the connection, checks again and
// queues.
func TestDeleteCheckRefusalIsNotRemembered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		makeDir(t, s)
		ctx := t.Context()
		c := s.conn()
		var refuse atomic.Bool
		var refusals atomic.Int32
		refuse.Store(true)
		c.setBefore(func(op, p string) error {
			if op == "delete" && strings.HasPrefix(p, dir+"/zkrwlock-acl-check-") && refuse.Load() {
				refusals.Add(1)
				return zk.ErrNoAuth
			}
			return nil
		})
		other, err := newRWLock(c, dir2)
		require.NoError(t, err)
		keep, err := other.Lock(ctx) // the connection's client lives on while it does
		require.NoError(t, err)
		refused := newLock(t, c)
		_, err = refused.RLock(ctx)
		require.ErrorIs(t, err, zk.ErrNoAuth)
		_, err = newLock(t, c).RLock(ctx)
		require.ErrorIs(t, err, zk.ErrNoAuth, "another RWLock on the connection")
		assert.Empty(t, s.lockNodes(dir), "refused before queueing")

		refuse.Store(false) // as after AddAuth
		g1, err := newLock(t, c).RLock(ctx)
		require.NoError(t, err)
		g2, err := refused.RLock(ctx)
		require.NoError(t, err)
		releaseAll(t, g1, g2, keep)
		assert.Equal(t, int32(2), refusals.Load())
		assert.Equal(t, 1, c.probes(), "then one yes for both")
	})
}

// A directory made by the lock with an ACL that does not let everyone
// delete is checked again once it exists; a connection whose check found
// no directory forgets its yes.
func TestDeleteCheckAgainInANewDirectory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		ctx := t.Context()
		c := s.conn()
		restricted := []zk.ACL{{Perms: zk.PermAll, Scheme: "auth", ID: ""}}
		g1, err := newLock(t, c, WithACL(restricted)).RLock(ctx)
		require.NoError(t, err)
		assert.Equal(t, 2, c.probes(), "before queueing, and in the directory it made")
		g2, err := newLock(t, c).RLock(ctx)
		require.NoError(t, err)
		assert.Equal(t, 2, c.probes(), "the second check's yes is remembered")
		releaseAll(t, g1, g2)

		s = newFakeServer()
		c = s.conn()
		g1, err = newLock(t, c).RLock(ctx) // lets everyone delete: no second check
		require.NoError(t, err)
		assert.Equal(t, 1, c.probes())
		g2, err = newLock(t, c).RLock(ctx)
		require.NoError(t, err)
		assert.Equal(t, 2, c.probes(), "the first check found no directory: not remembered")
		releaseAll(t, g1, g2)
	})
}
