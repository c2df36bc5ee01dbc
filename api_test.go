package rwlock_test

import (
	"context"
	"log/slog"
	"runtime"
	"time"

	"github.com/go-zookeeper/zk"

	rw "github.com/zkrwlock/rwlock"
)

// The exported API that programs outside this repository compile against.
// This file does not compile (and go vet, run by make check, fails) if a
// name or a signature changes.
var (
	_ func(*zk.Conn, string, ...rw.Option) (*rw.RWLock, error) = rw.New
	_ func([]zk.ACL) rw.Option                                 = rw.WithACL
	_ func(string) rw.Option                                   = rw.WithOwner
	_ func(*slog.Logger) rw.Option                             = rw.WithLogger
	_ func(time.Duration) rw.Option                            = rw.WithSessionTimeout
	_ func(time.Duration) rw.Option                            = rw.WithCleanupTimeout

	_ func(*rw.RWLock, context.Context) (*rw.Grant, error) = (*rw.RWLock).Lock
	_ func(*rw.RWLock, context.Context) (*rw.Grant, error) = (*rw.RWLock).RLock
	_ func(*rw.RWLock, context.Context) (*rw.Grant, error) = (*rw.RWLock).TryLock
	_ func(*rw.RWLock, context.Context) (*rw.Grant, error) = (*rw.RWLock).TryRLock
	_ func(*rw.RWLock) string                              = (*rw.RWLock).Path

	_ func(*rw.Grant, context.Context) error              = (*rw.Grant).Release
	_ func(*rw.Grant) <-chan struct{}                     = (*rw.Grant).Done
	_ func(*rw.Grant) error                               = (*rw.Grant).Err
	_ func(*rw.Grant) int64                               = (*rw.Grant).Token
	_ func(*rw.Grant) rw.Mode                             = (*rw.Grant).Mode
	_ func(*rw.Grant) string                              = (*rw.Grant).Node
	_ func(*rw.Grant) (time.Time, bool)                   = (*rw.Grant).Deadline
	_ func(*rw.Grant, context.Context) (*rw.Grant, error) = (*rw.Grant).Downgrade
	_ func(context.Context, *rw.Grant) context.Context    = rw.ContextWithGrant

	_ func(*rw.RWLock, context.Context, func(context.Context) error) error = (*rw.RWLock).WithRead
	_ func(*rw.RWLock, context.Context, func(context.Context) error) error = (*rw.RWLock).WithWrite

	_ func(*rw.RWLock, context.Context) (*rw.Group, context.Context, error)   = (*rw.RWLock).ReadGroup
	_ func(*rw.Group, func() error)                                           = (*rw.Group).Go
	_ func(*rw.Group, int)                                                    = (*rw.Group).SetLimit
	_ func(*rw.Group) error                                                   = (*rw.Group).Wait
	_ func(*rw.RWLock, context.Context, ...func(context.Context) error) error = (*rw.RWLock).ReadBatch

	_ func(*rw.RWLock, context.Context) ([]rw.Entry, error) = (*rw.RWLock).Queue
	_                                                       = rw.Entry{Node: "", Mode: rw.Write, Seq: int32(0), SessionID: int64(0), Owner: "", Held: false, Created: time.Time{}}
	_ []rw.Mode                                             = []rw.Mode{rw.Read, rw.Write}

	_ func(context.Context, []string, time.Duration, ...func(*zk.Conn)) (*zk.Conn, error) = rw.Dial

	// Dialects: the zero Dialect is the native one (iota order), so that a
	// lock made without WithDialect names its nodes as before.
	_ func(rw.Dialect) rw.Option = rw.WithDialect
	_                            = [...]rw.Dialect{
		rw.DialectNative, rw.DialectCurator, rw.DialectMutex, rw.DialectKazoo, rw.DialectKazooLock, rw.DialectKazooPatterns,
	}
	_ [0]struct{} = [rw.DialectNative]struct{}{}
	_ [4]struct{} = [rw.DialectKazooLock]struct{}{}
	_ [5]struct{} = [rw.DialectKazooPatterns]struct{}{}
	_ string      = rw.DialectCurator.String()
	_ rw.Entry    = rw.Entry{Family: rw.DialectKazoo, Peer: true}

	// Statistics and observation.
	_ func(rw.Observer) rw.Option  = rw.WithObserver
	_ func(int) int                = rw.SetContentionProfileRate
	_ func() []rw.ContentionRecord = rw.ContentionRecords
	_ []runtime.Frame              = rw.ContentionRecord{}.Frames

	// Capabilities on the same queue.
	_ func(context.Context, ...rw.Request) ([]*rw.Grant, error)            = rw.LockAll
	_ func(context.Context, ...*rw.Grant) error                            = rw.ReleaseAll
	_                                                                      = rw.Request{Lock: (*rw.RWLock)(nil), Mode: rw.Write}
	_ func(time.Duration) rw.Option                                        = rw.WithMaxHold
	_ func(*rw.Grant, context.Context, ...any) ([]zk.MultiResponse, error) = (*rw.Grant).Multi
	_ func(*rw.Grant, context.Context) error                               = (*rw.Grant).Check
	_ func(*rw.RWLock, context.Context, string) error                      = (*rw.RWLock).Revoke
	_ func(*rw.Grant) <-chan struct{}                                      = (*rw.Grant).Revoked
	_ func() rw.Option                                                     = rw.WithReadCoalescing

	// Elections: a write queue with the leader's value in its node.
	_ func(*zk.Conn, string, ...rw.Option) (*rw.Election, error)     = rw.NewElection
	_ func(*rw.Election, context.Context, []byte) (*rw.Grant, error) = (*rw.Election).Campaign
	_ func(*rw.Election, context.Context, []byte) error              = (*rw.Election).Proclaim
	_ func(*rw.Election, context.Context) error                      = (*rw.Election).Resign
	_ func(*rw.Election, context.Context) ([]byte, int64, error)     = (*rw.Election).Leader
	_ func(*rw.Election, context.Context) <-chan rw.Leadership       = (*rw.Election).Observe
	_                                                                = rw.Leadership{Value: []byte(nil), Term: int64(0)}
	_ func(time.Duration) rw.Option                                  = rw.WithLockDelay
	_                                                                = rw.AcquireEvent{Campaign: true}
	_                                                                = rw.GrantEvent{Term: true}

	_ []error = []error{rw.ErrWouldBlock, rw.ErrLost, rw.ErrReleased, rw.ErrInvalidPath, rw.ErrUpgrade,
		rw.ErrInvalidArgument, rw.ErrSequenceExhausted, rw.ErrHoldLimit, rw.ErrRevoked, rw.ErrNoLeader}
)
