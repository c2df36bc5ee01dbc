package rwlock_test

import (
	"context"
	"sync"

	rw "github.com/zkrwlock/rwlock"
)

// The exported API of issue 37's additions, as api_test.go checks the rest.
var (
	_ func(*rw.RWLock) sync.Locker                                              = rw.NewLocker
	_ func(context.Context, ...*rw.Grant) (context.Context, context.CancelFunc) = rw.GrantsContext
	_ func(context.Context) (*rw.Grant, bool)                                   = rw.GrantFromContext
)
