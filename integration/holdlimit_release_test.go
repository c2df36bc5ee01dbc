package integration

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// releaseAfterNoticeEnv makes TestHelperReleaseAfterNotice run, with the
// hold limit in it and the server, path and session timeout as for
// helperHold.
const releaseAfterNoticeEnv = "ZKRWLOCK_FAULT_RELEASE_AFTER_NOTICE"

// TestHelperReleaseAfterNotice is not a test: TestHoldLimitReleaseThenExit
// runs the test binary again as a process that takes the write lock with
// WithMaxHold, prints "held <node>", waits for the hold limit's notice,
// releases, prints "released", and exits at once without closing its
// connection, as a job that stops on the notice does.
func TestHelperReleaseAfterNotice(t *testing.T) {
	env := os.Getenv(releaseAfterNoticeEnv)
	if env == "" {
		return
	}
	limit, err := time.ParseDuration(env)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	_, g, _, _, fail := helperHold("release after notice", rwlock.WithMaxHold(limit))
	fmt.Printf("held %s\n", g.Node())
	<-g.Done()
	if err := g.Release(context.Background()); err != nil {
		fail(err)
	}
	fmt.Println("released")
	os.Exit(0) // the connection is not closed: its session lives on until it expires
}

// A job told of its hold limit releases and exits without closing its
// connection. Its node went as it released, so the next writer is granted
// at once: not at the limit, nor when the job's session expires.
func TestHoldLimitReleaseThenExit(t *testing.T) {
	const timeout, limit = 10 * time.Second, 4 * time.Second // told min(10s/4, 4s/2) = 2s before the limit
	srv := sharedServer(t)
	path := zktest.LockPath(t, "/it")
	child := startHelper(t, "TestHelperReleaseAfterNotice", releaseAfterNoticeEnv+"="+limit.String(),
		holderEnvServer+"="+srv.Addr(0), holderEnvPath+"="+path, holderEnvTimeout+"="+timeout.String())
	child.line(t, 60*time.Second, "held ")
	began := time.Now()
	ctx := testContext(t)
	w := goAcquire(t, ctx, connect(t, srv.ConnectString(), 0).lock(t, path).Lock)
	child.line(t, 30*time.Second, "released")
	child.wait(t)
	released := time.Since(began)
	g := w.granted(t, 30*time.Second)
	waited := time.Since(began) - released
	t.Logf("told and released %v after the grant; the next writer granted %v later", msec(released), msec(waited))
	require.Less(t, waited, time.Second, "the node went with the release: no wait for the limit or the session")
	require.NoError(t, g.Release(ctx))
}
