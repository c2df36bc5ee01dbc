package rwlock

import "testing"

// Export for testing: the contention profile's tests must call the lock
// from outside the package, whose frames the profile keeps, so they live in
// package rwlock_test, and need a lock on the in-memory fake.

// NewFakeLock returns a lock at path on a fresh in-memory server.
func NewFakeLock(t testing.TB, path string) *RWLock {
	t.Helper()
	c := newFakeServer().conn()
	l, err := newRWLock(c, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.background.Wait)
	t.Cleanup(c.close)
	return l
}
