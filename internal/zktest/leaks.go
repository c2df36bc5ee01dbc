package zktest

import (
	"bytes"
	"runtime"

	"go.uber.org/goleak"
)

// FindLeaks is goleak.Find less go-zookeeper's own leak, for the packages
// whose tests close connections while requests are under way.
//
// go-zookeeper v1.0.4's loop can stay blocked after Close in flushRequests:
// a request that met Close in queueRequest's "tie" gets ErrConnectionClosed
// there, then a write error, and the flush's third send on a channel of two
// never returns. That goroutine is go-zookeeper's. Its next step would have
// closed every watch channel of the connection (invalidateWatches), so the
// lock's goroutines that relay those watches (internal/zkclient) wait
// forever too. They are left out only while such a loop is stuck; otherwise
// every goroutine of the lock is checked.
func FindLeaks() error {
	stuck := goleak.IgnoreTopFunction("github.com/go-zookeeper/zk.(*Conn).flushRequests")
	err := goleak.Find(stuck)
	if err == nil || !zkLoopStuck() {
		return err
	}
	return goleak.Find(stuck, goleak.IgnoreTopFunction("github.com/zkrwlock/rwlock/internal/zkclient.(*Client).relay"))
}

// zkLoopStuck reports whether a goroutine is blocked in go-zookeeper's
// flushRequests.
func zkLoopStuck() bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		// "goroutine N [state]:" and then the function on top.
		_, rest, _ := bytes.Cut(g, []byte("\n"))
		if bytes.HasPrefix(rest, []byte("github.com/go-zookeeper/zk.(*Conn).flushRequests(")) {
			return true
		}
	}
	return false
}
