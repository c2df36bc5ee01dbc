package rwlock

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// A Locker whose grant is lost keeps its other callers out until Unlock,
// though ZooKeeper would grant them at once.
func TestLockerExcludesItsCallersAfterALoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		c := s.conn()
		c.setGranted(8 * time.Second)
		k := NewLocker(newLock(t, c)).(*locker)
		k.Lock()
		g := k.g.Load()
		require.NoError(t, s.delete(g.Node())) // by hand: the grant is lost
		<-g.Done()
		require.ErrorIs(t, g.Err(), ErrLost)

		second := make(chan struct{})
		go func() {
			k.Lock()
			close(second)
			k.Unlock()
		}()
		synctest.Wait()
		select {
		case <-second:
			t.Fatal("a second caller of the Locker got in before the first unlocked")
		default:
		}
		k.Unlock() // the lost grant's release sends nothing
		<-second
		synctest.Wait()
		require.Nil(t, k.g.Load())
	})
}
