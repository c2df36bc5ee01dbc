package main

import (
	"flag"
	"fmt"
	"path"
	"strings"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/lockname"
)

// Lock node names of every family that may share a lock path come from
// internal/lockname, as the library's do: the CLI needs them to find lock
// directories (ls), to show names without their guids, and to tell the
// family of a node.

// isLockNode reports whether a child is a lock node of any family. The walk
// of ls uses it to find lock directories and to skip lock nodes, which are
// ephemeral and so have no children to list.
func isLockNode(name string) bool {
	_, ok := lockname.Parse(name)
	return ok
}

// nodeName is a lock node's name without the directory and without the
// client's guid: write-0000000007, __WRIT__0000000008.
func nodeName(node string) string {
	base := path.Base(node)
	if n, ok := lockname.Parse(base); ok {
		return n.Bare()
	}
	return base
}

// family names who made a node, for the FAMILY column: zkrwlock, in its
// dialect when that is not the native one (zkrwlock/curator), or the peer
// library (curator, curator-mutex, zk.Lock, kazoo; native for zkrwlock's
// old unprotected names, whatever the dialect that also makes them).
func family(e rwlock.Entry) string {
	if !e.Peer {
		if e.Family == rwlock.DialectNative {
			return "zkrwlock"
		}
		return "zkrwlock/" + e.Family.String()
	}
	switch e.Family {
	case rwlock.DialectCurator:
		return "curator"
	case rwlock.DialectMutex:
		if n, ok := lockname.Parse(path.Base(e.Node)); ok && n.Protected {
			return "zk.Lock" // Curator's mutex has a uuid where zk.Lock has a guid
		}
		return "curator-mutex"
	case rwlock.DialectKazooPatterns:
		return rwlock.DialectNative.String() // unprotected read-/write- names, read in the kazoo-patterns dialect
	}
	return e.Family.String()
}

// dialects are the values of --dialect.
var dialects = []rwlock.Dialect{
	rwlock.DialectNative, rwlock.DialectCurator, rwlock.DialectMutex, rwlock.DialectKazoo, rwlock.DialectKazooLock,
	rwlock.DialectKazooPatterns,
}

// dialectFlag is --dialect: the names our nodes are created with.
type dialectFlag struct{ d rwlock.Dialect }

func (f *dialectFlag) String() string { return f.d.String() }

func (f *dialectFlag) Set(s string) error {
	for _, d := range dialects {
		if s == d.String() {
			f.d = d
			return nil
		}
	}
	return fmt.Errorf("unknown dialect %q (one of %s)", s, dialectNames())
}

func dialectNames() string {
	names := make([]string, len(dialects))
	for i, d := range dialects {
		names[i] = d.String()
	}
	return strings.Join(names, ", ")
}

const dialectHelp = "the `DIALECT` of our lock nodes' names, to share the lock with another library: " +
	`native; curator (Curator InterProcessReadWriteLock); mutex (Curator InterProcessMutex, go-zookeeper zk.Lock); ` +
	`kazoo (kazoo ReadLock/WriteLock, where no kazoo Lock uses the path); kazoo-lock (kazoo Lock, ReadLock, WriteLock); ` +
	`kazoo-patterns (native names, where every kazoo lock is made with extra_lock_patterns: ("write-", "read-") ` +
	`for WriteLock and Lock, ("write-",) for ReadLock; in native, kazoo's nodes are refused). ` +
	`Every zkrwlock client of a path must use the same one`

// lsDialectHelp is ls's --dialect, which makes no node: it says how to read
// the names under PREFIX.
const lsDialectHelp = "the `DIALECT` of the zkrwlock clients under PREFIX, which says how to read the names there " +
	`(ls makes no node): kazoo-patterns declares that every kazoo lock there is made with extra_lock_patterns ` +
	`(see docs/peers.md), so kazoo's nodes beside native ones are no mixed fleet; native and the other ` +
	`dialects take kazoo's nodes not to count native names`

func (f *dialectFlag) register(fs *flag.FlagSet) { f.registerAs(fs, dialectHelp) }

// registerAs registers --dialect with its help text.
func (f *dialectFlag) registerAs(fs *flag.FlagSet, help string) { fs.Var(f, "dialect", help) }
