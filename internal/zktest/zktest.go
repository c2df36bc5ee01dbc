// Package zktest holds the test helpers that the packages testing against
// real ZooKeeper servers share: integration/, cmd/zkrwlock and bench/.
package zktest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// LockPath returns a lock path under root that no other test uses: the
// test's name and a random suffix, so that tests sharing a server never
// share a lock.
func LockPath(t testing.TB, root string) string {
	var b [4]byte
	rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	return fmt.Sprintf("%s/%s-%s", root, name, hex.EncodeToString(b[:]))
}

// WaitFor polls cond until it holds, and fails the test when it does not
// within timeout, saying what it waited for. Call it from the test's
// goroutine.
func WaitFor(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	Poll(t, timeout, cond, func() string { return fmt.Sprintf(format, args...) })
}

// Poll is WaitFor with a failure message computed only when it fails, so
// that it can tell what cond saw last. It calls cond every 10ms on the
// test's goroutine, so cond may use require (unlike require.Eventually's).
func Poll(t testing.TB, timeout time.Duration, cond func() bool, why func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, why())
		}
		select {
		case <-tick.C:
		case <-t.Context().Done():
			t.Fatal("test context done")
		}
	}
}

// SyncBuffer is a bytes.Buffer that goroutines may write and read at once:
// a process's output, a logger's.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
