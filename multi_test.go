package rwlock

import (
	"testing"
	"testing/synctest"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockSet takes a set of three locks on c: two written, one read.
func lockSet(t *testing.T, c *fakeConn) []*Grant {
	t.Helper()
	reqs := []Request{{Mode: Write}, {Mode: Read}, {Mode: Write}}
	for i, p := range []string{dir + "/a", dir + "/b", dir + "/c"} {
		l, err := newRWLock(c, p)
		require.NoError(t, err)
		t.Cleanup(l.background.Wait)
		reqs[i].Lock = l
	}
	t.Cleanup(c.close)
	grants, err := LockAll(t.Context(), reqs...)
	require.NoError(t, err)
	return grants
}

// setNodes counts the nodes left in the set's directories.
func setNodes(s *fakeServer) int {
	return len(s.lockNodes(dir+"/a")) + len(s.lockNodes(dir+"/b")) + len(s.lockNodes(dir+"/c"))
}

// One transaction deletes the set, and marks the writers' nodes held as
// Release would.
func TestReleaseAllOneTransaction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		grants := lockSet(t, c)
		var ops []string
		c.setBefore(func(op, _ string) error {
			ops = append(ops, op)
			return nil
		})
		require.NoError(t, ReleaseAll(t.Context(), grants...))
		assert.Equal(t, []string{"multi"}, ops)
		assert.Zero(t, setNodes(s))
		for _, g := range grants {
			assert.ErrorIs(t, g.Err(), ErrReleased)
		}
		require.NoError(t, ReleaseAll(t.Context(), grants...), "released already")
	})
}

// A transaction the server refuses changed nothing: each grant is released
// alone, and only a refused one stays held.
func TestReleaseAllRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		grants := lockSet(t, c)
		refused := grants[1].Node()
		c.setBefore(func(op, p string) error {
			if op == "multi" || p == refused {
				return zk.ErrNoAuth // an ACL changed since the set was taken
			}
			return nil
		})
		err := ReleaseAll(t.Context(), grants...)
		require.ErrorIs(t, err, zk.ErrNoAuth)
		assert.Equal(t, 1, setNodes(s), "only the refused grant's node stays")
		assert.NoError(t, grants[1].Err(), "and its grant with it")
		assert.ErrorIs(t, grants[0].Err(), ErrReleased)
		assert.ErrorIs(t, grants[2].Err(), ErrReleased)
		c.setBefore(nil)
		require.NoError(t, ReleaseAll(t.Context(), grants...))
		assert.Zero(t, setNodes(s))
	})
}

// A transaction whose answer is lost, or that never reached the server:
// the grants end, ReleaseAll says the deletion goes on, and no node
// outlives it.
func TestReleaseAllLostAnswer(t *testing.T) {
	for _, applied := range []bool{true, false} {
		t.Run(map[bool]string{true: "applied", false: "not sent"}[applied], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFakeServer()
				c := s.conn()
				grants := lockSet(t, c)
				lose := func(op, _ string) error {
					if op == "multi" {
						return zk.ErrConnectionClosed
					}
					return nil
				}
				if applied {
					c.setAfter(func(op, p string, err error) error { return cmpErr(lose(op, p), err) })
				} else {
					c.setBefore(lose)
				}
				err := ReleaseAll(t.Context(), grants...)
				require.ErrorIs(t, err, errFinishing)
				for _, g := range grants {
					assert.ErrorIs(t, g.Err(), ErrReleased)
				}
				for _, g := range grants {
					g.l.background.Wait()
				}
				assert.Zero(t, setNodes(s))
			})
		})
	}
}

// cmpErr is lost's error if there is one, else err.
func cmpErr(lost, err error) error {
	if lost != nil {
		return lost
	}
	return err
}

// Grants that are not the owners of held nodes are released as Release
// releases them: a downgraded write grant (its read grant is released), a
// nested grant, a lost grant, a grant of another connection, nil, and a
// grant named twice.
func TestReleaseAllMixed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		grants := lockSet(t, c)
		ctx := t.Context()
		read, err := grants[0].Downgrade(ctx)
		require.NoError(t, err)
		nested, err := grants[1].l.RLock(ContextWithGrant(ctx, grants[1]))
		require.NoError(t, err)
		require.NoError(t, c.Delete(grants[2].Node(), -1)) // by hand: grants[2] is lost
		synctest.Wait()
		other := newLock(t, s.conn())
		alone, err := other.Lock(ctx)
		require.NoError(t, err)

		require.NoError(t, ReleaseAll(ctx, grants[0], nil, nested, grants[1], grants[2], alone, grants[1]))
		assert.Zero(t, setNodes(s))
		assert.Empty(t, s.lockNodes(dir))
		assert.ErrorIs(t, read.Err(), ErrReleased)
		assert.ErrorIs(t, nested.Err(), ErrReleased)
		assert.ErrorIs(t, grants[2].Err(), ErrLost)
	})
}
