package integration

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/tier"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

var leaderTrials = flag.Int("leader.trials", 4,
	"leader kills in TestFaultLeaderKillHolderKeepsGrant (the report on issue 9 used 20)")

// A holder with a long session (10s) on the leader of a 3-member ensemble
// keeps its grant when the leader dies by kill -9: the session lives on
// the ensemble, not the member, and the client is back on another member
// after the election and go-zookeeper's 1s pause between rounds of its
// server list: about a second on an idle machine, a few on a loaded one,
// well within what its lease allows. Each
// trial puts a new holder on the current leader, kills it, waits for a new
// leader and for the holder's session (a fresh request answered), restarts
// the member, and requires the grant held past the moment a lease taken
// just before the kill would have ended.
func TestFaultLeaderKillHolderKeepsGrant(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	const timeout = 10 * time.Second
	cl := faultServer(t, 3)

	type trial struct {
		elected, back time.Duration // kill → a new leader serves; → the holder's session answers
		lostAt        time.Duration // kill → Done closed; 0 if held
		err           error         // what Err said at the end
	}
	var trials []trial
	for i := range *leaderTrials {
		t.Run(fmt.Sprint("trial", i), func(t *testing.T) {
			leader, err := cl.Leader()
			require.NoError(t, err)
			holder := connect(t, cl.ConnectString(), timeout, withHome(leader)).conn
			require.Equal(t, cl.Addr(leader), holder.Server(), "the holder is on the leader")
			path := zktest.LockPath(t, "/it")
			l, err := rwlock.New(holder, path, rwlock.WithSessionTimeout(timeout))
			require.NoError(t, err)
			ctx := testContext(t)
			g, err := l.Lock(ctx)
			require.NoError(t, err)
			done := closedAt(ctx, g.Done())
			require.NoError(t, g.Err())
			session := holder.SessionID()

			killed := time.Now()
			require.NoError(t, cl.Kill(leader))
			defer restartMember(t, cl, leader) // also if the trial fails: the next one needs every member
			newLeader, err := cl.Leader()
			require.NoError(t, err)
			tr := trial{elected: time.Since(killed)}
			waitSession(t, holder, session, 30*time.Second)
			exists, _, err := holder.Exists(g.Node())
			require.NoError(t, err, "a fresh request on the holder's session")
			tr.back = time.Since(killed)
			restartMember(t, cl, leader)

			// A lease from just before the kill ends at 3/4 of the timeout
			// after it: past that, only a lease renewed on the new member
			// keeps the grant.
			select {
			case at := <-done:
				tr.lostAt = at.Sub(killed)
			case <-time.After(time.Until(killed.Add(timeout*3/4 + 500*time.Millisecond))):
			}
			tr.err = g.Err()
			trials = append(trials, tr)
			t.Logf("leader %d killed → member %d leads %v, → holder's session answers %v; grant: %s",
				leader, newLeader, msec(tr.elected), msec(tr.back), describeLoss(tr.lostAt, tr.err))

			require.Zero(t, tr.lostAt, "the holder lost its grant %v after the leader's kill: %v", msec(tr.lostAt), tr.err)
			require.NoError(t, tr.err)
			require.True(t, exists, "the holder's node outlived the leader")
			mustRelease(t, g)
		})
	}

	var lost int
	var summary strings.Builder
	for i, tr := range trials {
		if tr.lostAt > 0 || tr.err != nil {
			lost++
		}
		fmt.Fprintf(&summary, "\n  trial %d: elected %v, session back %v, %s", i, msec(tr.elected), msec(tr.back), describeLoss(tr.lostAt, tr.err))
	}
	t.Logf("%d leader kills with the holder on the leader (session timeout %v): %d grants lost%s",
		len(trials), timeout, lost, summary.String())
}

// describeLoss says whether and when a grant was lost.
func describeLoss(lostAt time.Duration, err error) string {
	if lostAt == 0 && err == nil {
		return "held"
	}
	return fmt.Sprintf("LOST after %v (%v)", msec(lostAt), err)
}

// Issue 23, item 2: WithRead and ReadBatch whose functions succeeded
// under grants that were never lost report success when the leader they
// were connected to dies right under their release (the deletion cut by
// the connection goes on in the background), and the nodes go once the
// session is back on another member. Before, every call returned
// "release …: zk: connection closed".
func TestFaultLeaderKillUnderReleaseIsNoFailure(t *testing.T) {
	tier.Long(t)
	tier.NoRace(t, zk35)
	const timeout = 10 * time.Second
	const calls = 16
	cl := faultServer(t, 3)
	leader, err := cl.Leader()
	require.NoError(t, err)
	c := connect(t, cl.ConnectString(), timeout, withHome(leader))
	require.Equal(t, cl.Addr(leader), c.conn.Server(), "the client is on the leader")
	path := zktest.LockPath(t, "/it")
	l, err := rwlock.New(c.conn, path, rwlock.WithSessionTimeout(timeout))
	require.NoError(t, err)
	ctx := testContext(t)

	held, killed := make(chan struct{}, calls), make(chan struct{})
	fn := func(ctx context.Context) error {
		held <- struct{}{}
		<-killed
		return nil
	}
	errs := make(chan error, calls)
	for i := range calls {
		go func() {
			if i%2 == 0 {
				errs <- l.WithRead(ctx, fn)
			} else {
				errs <- l.ReadBatch(ctx, fn)
			}
		}()
	}
	for range calls {
		<-held
	}
	session := c.conn.SessionID()
	require.NoError(t, cl.Kill(leader))
	defer restartMember(t, cl, leader)
	close(killed)
	for range calls {
		require.NoError(t, <-errs, "fn succeeded under a grant never lost")
	}
	waitSession(t, c.conn, session, 30*time.Second)
	waitNodes(t, c.conn, path, 30*time.Second)
}
