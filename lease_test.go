package rwlock

// The lease clock's safety argument (internal/zkclient/lease.go), tested where an answer
// could prove less than it seems to.

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A NoAuth answer proves nothing about the leader: with
// zookeeper.enableEagerACLCheck=true (ZOOKEEPER-3418, 3.6+),
// FollowerRequestProcessor.run calls zks.authWriteRequest first, and a write
// that fails the ACL check is answered NoAuth by the follower itself
// (ZooKeeperServer.authWriteRequest sends the reply and drops the request):
// the leader never hears of it. A follower cut off from the leader keeps
// serving clients for up to syncLimit ticks.
//
// Here the connection stands for such a follower: syncs (and everything
// else) go unanswered, but any write that fails the ACL check is answered
// at once. The application retries a lock on another path whose directory
// does not let it delete (checkDeletable's DELETE probe is answered NoAuth
// every time). The grant on the first lock is never lost, though nothing
// has reached the leader for 3T.
func TestNoAuthAnswerDoesNotRenewTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 8 * time.Second
		s := newFakeServer()
		c := s.conn()
		c.setGranted(timeout)
		l := newLock(t, c)
		g, err := l.Lock(t.Context())
		require.NoError(t, err)
		other, err := newRWLock(c, "/forbidden")
		require.NoError(t, err)

		cutOff := make(chan struct{})
		c.setBefore(func(op, p string) error {
			if op == "delete" && strings.HasPrefix(p, "/forbidden/") {
				return zk.ErrNoAuth // the follower's eager ACL check answers on its own
			}
			<-cutOff // forwarded to a leader that is gone: never answered
			return zk.ErrConnectionClosed
		})
		ctx, cancel := context.WithCancel(t.Context())
		retried := make(chan struct{})
		go func() {
			defer close(retried)
			for ctx.Err() == nil {
				_, err := other.TryLock(ctx) // fails with ErrNoAuth, at once
				if ctx.Err() == nil {
					assert.ErrorIs(t, err, zk.ErrNoAuth)
				}
				sleep(ctx, timeout/16)
			}
		}()
		time.Sleep(3 * timeout)
		err = g.Err()
		cancel()
		<-retried
		close(cutOff)
		c.setBefore(nil)
		synctest.Wait()
		assert.Error(t, err, "nothing reached the leader for 3T (the session expired at T), "+
			"yet the grant is held: locally answered NoAuth replies renewed the lease")
	})
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}
