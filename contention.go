package rwlock

import (
	"cmp"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The contention profile is the lock's counterpart of Go's mutex profile,
// which runtime.SetMutexProfileFraction sets. It is a sampled record of
// where the program waited for locks, and for how long. About one
// acquisition in rate is sampled, as it returns. The stack of its caller is
// taken then. The public entry point is still on the stack then, so the
// caller's frames are too. The sample is added to the record of its stack
// and lock path. Acquisitions that are not sampled pay one atomic load.
// With the profile off, the default, they pay nothing else.

var contentionRate atomic.Int64

// SetContentionProfileRate sets the rate of the contention profile: on
// average, one acquisition in rate is recorded. A rate of 1 records every
// acquisition, 0 turns the profile off, and a negative rate changes
// nothing. The default is 0. It returns the previous rate. The rate applies
// to every lock in the process, as [runtime.SetMutexProfileFraction] does
// to every mutex. Records already taken are kept when the rate changes.
func SetContentionProfileRate(rate int) int {
	if rate < 0 {
		return int(contentionRate.Load())
	}
	return int(contentionRate.Swap(int64(rate)))
}

// sampled decides whether to record one acquisition.
func sampled(rate int64) bool { return rate == 1 || rand.Int64N(rate) == 0 }

// maxContentionStack is the deepest stack a record keeps, as the runtime's
// profiles do by default.
const maxContentionStack = 32

// A ContentionRecord is one entry of the contention profile. It counts the
// acquisitions of one lock path, in one mode, with one outcome, made from
// one call stack.
type ContentionRecord struct {
	Lock    string // the lock's path
	Mode    Mode   // Read or Write
	Outcome string // how the acquisitions ended, as AcquireEvent.Outcome says
	// Contended is true when the acquisitions found another node in their
	// way: they waited, or TryLock or TryRLock found the lock taken.
	// Uncontended ones are recorded too, with their round trips as delay,
	// so a profile shows both. In pprof, -tagfocus contended=true keeps
	// only the waits behind another holder, as in Go's mutex profile.
	Contended bool
	// Stack is the call stack of the acquisitions as runtime.Callers
	// returns it, leaf first, from the public entry point on: Lock, RLock,
	// WithRead, ReadBatch and so on.
	Stack []uintptr
	// Frames are the functions and lines of Stack. Frames inside the lock
	// below the entry point are left out.
	Frames []runtime.Frame
	// Count estimates the number of these acquisitions, and Delay their
	// total time from call to return. Each sample counts for rate
	// acquisitions, at the rate in force when it was taken, as in the mutex
	// profile.
	Count int64
	Delay time.Duration
}

// framesOf returns the functions and lines of stack, from the lock's entry
// point, as ContentionRecord.Frames says.
func framesOf(stack []uintptr) []runtime.Frame {
	var out []runtime.Frame
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		out = append(out, f)
		if !more {
			break
		}
	}
	// The first program counter may hold frames of the lock inlined into
	// the entry point, or the entry point inlined into its caller. Keep the
	// outermost frame of the lock and what follows it.
	first := 0
	for i, f := range out {
		if !inLockPackage(f.Function) {
			break
		}
		first = i
	}
	return out[first:]
}

type contentionKey struct {
	lock      string
	mode      Mode
	outcome   string
	contended bool
	depth     int
	stack     [maxContentionStack]uintptr
}

type contentionValue struct {
	count int64
	delay time.Duration
}

// contention holds the records. Only sampled acquisitions touch it, so
// one mutex is enough.
var contention struct {
	mu sync.Mutex
	m  map[contentionKey]*contentionValue
}

// recordContention adds one sampled acquisition. It is called by
// RWLock.acquired, from an entry point's acquisition (acquire, LockAll,
// readShared). The stack is taken from here, and cut at the caller's end
// of the lock's frames.
func recordContention(lock string, mode Mode, outcome string, contended bool, wait time.Duration, rate int64) {
	var pcs [maxContentionStack + 16]uintptr
	n := runtime.Callers(3, pcs[:]) // from acquired's caller, acquire
	k := contentionKey{lock: lock, mode: mode, outcome: outcome, contended: contended}
	k.depth = copy(k.stack[:], callerStack(pcs[:n]))
	contention.mu.Lock()
	defer contention.mu.Unlock()
	if contention.m == nil {
		contention.m = make(map[contentionKey]*contentionValue)
	}
	v := contention.m[k]
	if v == nil {
		v = &contentionValue{}
		contention.m[k] = v
	}
	v.count += rate
	v.delay += wait * time.Duration(rate)
}

// callerStack cuts the lock's own frames off the top of pcs, and keeps the
// public entry point. That is the program counter before the first one that
// holds a frame of other code. If the entry point was inlined into that
// one, it is that one itself.
func callerStack(pcs []uintptr) []uintptr {
	for i := range pcs {
		innermost, allLock := "", true
		frames := runtime.CallersFrames(pcs[i : i+1])
		for {
			f, more := frames.Next()
			if innermost == "" {
				innermost = f.Function
			}
			allLock = allLock && inLockPackage(f.Function)
			if !more {
				break
			}
		}
		if allLock {
			continue
		}
		if inLockPackage(innermost) || i == 0 {
			return pcs[i:]
		}
		return pcs[i-1:]
	}
	return pcs[max(len(pcs)-1, 0):]
}

// lockPackage prefixes the names of this package's functions. The functions
// of its subpackages and of its external tests do not match it.
const lockPackage = "github.com/zkrwlock/rwlock."

func inLockPackage(function string) bool { return strings.HasPrefix(function, lockPackage) }

// ContentionRecords returns the contention profile recorded so far, the
// largest delay first; see [SetContentionProfileRate]. The module
// github.com/zkrwlock/rwlock/lockprof writes it as a pprof profile for go
// tool pprof.
func ContentionRecords() []ContentionRecord {
	contention.mu.Lock()
	defer contention.mu.Unlock()
	out := make([]ContentionRecord, 0, len(contention.m))
	for k, v := range contention.m {
		stack := slices.Clone(k.stack[:k.depth])
		out = append(out, ContentionRecord{
			Lock: k.lock, Mode: k.mode, Outcome: k.outcome, Contended: k.contended,
			Stack: stack, Frames: framesOf(stack),
			Count: v.count, Delay: v.delay,
		})
	}
	slices.SortFunc(out, func(a, b ContentionRecord) int { return cmp.Compare(b.Delay, a.Delay) })
	return out
}
