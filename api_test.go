package rwlock_test

import (
	"github.com/zkrwlock/rwlock"
)

// The dialect API of DESIGN.md, checked by the compiler: WithDialect's
// signature, the five constants, and that the zero Dialect is the native
// one (iota order), so that a lock made without WithDialect names its
// nodes as before.
var (
	_ func(rwlock.Dialect) rwlock.Option = rwlock.WithDialect
	_                                    = [...]rwlock.Dialect{
		rwlock.DialectNative, rwlock.DialectCurator, rwlock.DialectMutex, rwlock.DialectKazoo, rwlock.DialectKazooLock,
	}
	_ [0]struct{}  = [rwlock.DialectNative]struct{}{}
	_ [4]struct{}  = [rwlock.DialectKazooLock]struct{}{}
	_ string       = rwlock.DialectCurator.String()
	_ rwlock.Entry = rwlock.Entry{Family: rwlock.DialectKazoo, Peer: true}
)
