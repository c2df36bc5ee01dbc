package bench

import (
	"encoding/binary"
	"maps"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// wire counts, on the clients' side of their connections, what a set of
// sessions exchanges with the servers: the requests they sent and the bytes
// the servers sent them, by operation. It reads go-zookeeper's framing:
// every request is one Write of a whole packet (length, xid, opcode, body),
// after the handshake, which has no xid; every answer is a length, then the
// request's xid (-1 for a notification, -2 for a ping's answer). Unlike
// mntr's zk_packets_received, it tells pings and lease renewals apart, and
// counts only these sessions.
type wire struct {
	mu    sync.Mutex
	ops   map[int32]int64 // requests sent by opcode, pings left out; guarded by mu
	bytes map[int32]int64 // bytes received by the opcode they answer; guarded by mu
}

// Opcodes of go-zookeeper's (constants.go), which it does not export, and
// this file's own for what answers no request.
const (
	opPing         = 11
	opSync         = 9
	opNotification = -1000 // a watch's event
	opUnknown      = -1001 // an answer to no request we saw
)

var opNames = map[int32]string{
	1: "create", 2: "delete", 3: "exists", 4: "getData", 5: "setData", 8: "getChildren", 9: "sync",
	12: "getChildren2", 13: "check", 14: "multi", 15: "create2", 101: "setWatches", -11: "close",
	opPing: "ping", opNotification: "notification", opUnknown: "unknown",
}

func opName(op int32) string {
	if name, ok := opNames[op]; ok {
		return name
	}
	return "op" + strconv.Itoa(int(op))
}

// dialer is the option that routes a session's connections through w.
func (w *wire) dialer() func(*zk.Conn) {
	return zk.WithDialer(func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &countedConn{Conn: c, w: w, sent: map[int32]int32{}}, nil
	})
}

// wireSnap is a wire's counts at one moment.
type wireSnap struct{ ops, bytes map[int32]int64 }

func (w *wire) snap() wireSnap {
	w.mu.Lock()
	defer w.mu.Unlock()
	return wireSnap{maps.Clone(w.ops), maps.Clone(w.bytes)}
}

// wireDelta is what was exchanged between two snaps, without pings and
// lease renewals (syncs), which a session sends by the clock: bytes the
// servers sent, requests, and each by operation; and the syncs apart.
type wireDelta struct {
	bytes, requests int64
	ops, opBytes    map[string]int64
	syncs           int64
}

func (s wireSnap) since(from wireSnap) wireDelta {
	d := wireDelta{ops: map[string]int64{}, opBytes: map[string]int64{}}
	for op, n := range s.ops {
		n -= from.ops[op]
		switch {
		case n == 0, op == opPing:
		case op == opSync:
			d.syncs += n
		default:
			d.requests += n
			d.ops[opName(op)] += n
		}
	}
	for op, n := range s.bytes {
		if n -= from.bytes[op]; n != 0 && op != opSync && op != opPing {
			d.bytes += n
			d.opBytes[opName(op)] += n
		}
	}
	return d
}

// countedConn is one connection counted by its wire. go-zookeeper reads
// on one goroutine and writes on another.
type countedConn struct {
	net.Conn
	w *wire

	writeHandshaken bool // the first Write, the handshake, was seen; the writer's

	// The reader's: the answer being read, its head (length, xid) and the
	// bytes of it still to come. The handshake's answer has no xid; it
	// counts as opUnknown.
	head   []byte
	left   int64
	op     int32
	readHS bool

	mu   sync.Mutex
	sent map[int32]int32 // xid -> opcode of requests not yet answered; guarded by mu
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	for b := p[:n]; len(b) > 0; {
		if c.left > 0 { // inside an answer's body
			k := min(int64(len(b)), c.left)
			c.count(c.op, k)
			c.left -= k
			b = b[k:]
			continue
		}
		k := min(len(b), 8-len(c.head))
		c.head = append(c.head, b[:k]...)
		b = b[k:]
		if len(c.head) < 8 {
			continue
		}
		length := int64(binary.BigEndian.Uint32(c.head[:4]))
		xid := int32(binary.BigEndian.Uint32(c.head[4:8]))
		switch {
		case !c.readHS:
			c.readHS, c.op = true, opUnknown
		case xid == -1:
			c.op = opNotification
		case xid == -2:
			c.op = opPing
		default:
			c.mu.Lock()
			op, ok := c.sent[xid]
			delete(c.sent, xid)
			c.mu.Unlock()
			c.op = opUnknown
			if ok {
				c.op = op
			}
		}
		c.count(c.op, 8)
		c.left = length - 4
		c.head = c.head[:0]
	}
	return n, err
}

func (c *countedConn) count(op int32, n int64) {
	c.w.mu.Lock()
	if c.w.bytes == nil {
		c.w.bytes = map[int32]int64{}
	}
	c.w.bytes[op] += n
	c.w.mu.Unlock()
}

func (c *countedConn) Write(p []byte) (int, error) {
	if !c.writeHandshaken {
		c.writeHandshaken = true
	} else if len(p) >= 12 {
		xid := int32(binary.BigEndian.Uint32(p[4:8]))
		op := int32(binary.BigEndian.Uint32(p[8:12]))
		c.mu.Lock()
		c.sent[xid] = op
		c.mu.Unlock()
		c.w.mu.Lock()
		if c.w.ops == nil {
			c.w.ops = map[int32]int64{}
		}
		c.w.ops[op]++
		c.w.mu.Unlock()
	}
	return c.Conn.Write(p)
}

// memSnap is the process's memory at one moment, after a collection that
// also returned free pages to the system: live heap, heap spans in use,
// goroutine stacks, resident set, and all heap bytes ever allocated.
type memSnap struct {
	heapAlloc, heapInuse, stack, rss, totalAlloc uint64
	goroutines                                   int
}

func memNow() memSnap {
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSnap{heapAlloc: ms.HeapAlloc, heapInuse: ms.HeapInuse, stack: ms.StackInuse, rss: rss(),
		totalAlloc: ms.TotalAlloc, goroutines: runtime.NumGoroutine()}
}

// rss reads the resident set size from /proc (Linux); 0 elsewhere.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// memPer puts what grew from m0 to m1, per one of n, under prefix_*.
func (r *record) memPer(prefix string, m0, m1 memSnap, n int) {
	per := func(a, b uint64) float64 { return (float64(b) - float64(a)) / float64(n) }
	r.put(prefix+"_heap_bytes", per(m0.heapAlloc, m1.heapAlloc))
	r.put(prefix+"_heap_inuse_bytes", per(m0.heapInuse, m1.heapInuse))
	r.put(prefix+"_stack_bytes", per(m0.stack, m1.stack))
	r.put(prefix+"_rss_bytes", per(m0.rss, m1.rss))
	r.put(prefix+"_allocated_bytes", per(m0.totalAlloc, m1.totalAlloc))
	r.put(prefix+"_goroutines", float64(m1.goroutines-m0.goroutines)/float64(n))
}
