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

// The contention profile is the lock's counterpart of Go's mutex profile
// (runtime.SetMutexProfileFraction): a sampled record of where the program
// waited for locks, and for how long. About one acquisition in rate is
// sampled, as it returns: the stack of its caller is taken then (the
// public entry point is still on the stack, so the caller's frames are
// too), and added to the record of its stack and lock path. Acquisitions
// that are not sampled pay one atomic load; with the profile off (the
// default), nothing else.
//
// The package github.com/zkrwlock/rwlock/lockprof writes the records as a
// pprof profile for go tool pprof.

var contentionRate atomic.Int64

// SetContentionProfileRate sets the rate of the contention profile: on
// average, one acquisition in rate is recorded. 1 records every
// acquisition; 0, the default, turns the profile off; a negative rate
// changes nothing. It returns the previous rate. It applies to every lock
// in the process, as [runtime.SetMutexProfileFraction] does to every
// mutex, and records already taken are kept when the rate changes.
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

// A ContentionRecord is one entry of the contention profile: the
// acquisitions of one lock path, in one mode, with one outcome, made from
// one call stack.
type ContentionRecord struct {
	Lock    string // the lock's path
	Mode    Mode   // Read or Write
	Outcome string // how the acquisitions ended (see AcquireEvent.Outcome)
	// Contended: the acquisitions found another node in their way (they
	// waited, or TryLock or TryRLock found the lock taken). Uncontended
	// ones are recorded too, with their round trips as delay, so that a
	// profile shows both; pprof's -tagfocus contended=true keeps only the
	// waits behind another holder, as Go's mutex profile does.
	Contended bool
	// Stack is the call stack of the acquisitions, as program counters in
	// the form runtime.Callers returns them (leaf first): it starts with the
	// public entry point (Lock, RLock, WithRead, ReadBatch, ...), and goes
	// on with its callers.
	Stack []uintptr
	// Frames are the functions and lines of Stack, leaf first: the public
	// entry point of the lock, then its callers. Frames inside the lock
	// below the entry point are left out.
	Frames []runtime.Frame
	// Count estimates the number of these acquisitions, and Delay the
	// total time they took, from call to return: each sampled acquisition
	// counts for rate acquisitions, at the rate in force when it was
	// sampled, as the mutex profile does.
	Count int64
	Delay time.Duration
}

// framesOf returns the functions and lines of stack, from the lock's
// entry point (see ContentionRecord.Frames).
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
	// the entry point, or the entry point inlined into its caller: keep
	// the outermost frame of the lock and what follows it.
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

// contention holds the records. It is touched only by sampled
// acquisitions, so one mutex is enough.
var contention struct {
	mu sync.Mutex
	m  map[contentionKey]*contentionValue
}

// recordContention adds one sampled acquisition. It is called by
// RWLock.acquired, from acquire, from the entry point: the stack is taken
// from here, and cut at the caller's end of the lock's frames.
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

// callerStack cuts the lock's own frames off the top of pcs, keeping the
// public entry point: the program counter before the first one that holds
// a frame of other code, or that one itself if the entry point was
// inlined into it.
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

// lockPackage prefixes the names of this package's functions (not those
// of its subpackages or of its external tests).
const lockPackage = "github.com/zkrwlock/rwlock."

func inLockPackage(function string) bool { return strings.HasPrefix(function, lockPackage) }

// ContentionRecords returns the contention profile recorded so far (see
// [SetContentionProfileRate]), the largest delay first.
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
