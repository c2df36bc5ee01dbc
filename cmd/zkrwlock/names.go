package main

import (
	"flag"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/zkrwlock/rwlock"
)

// Lock node names of every family that may share a lock path (see the
// library's nodename.go, which has the last word): zkrwlock's in each of its
// dialects, Curator's read/write lock and mutex, go-zookeeper's zk.Lock and
// kazoo's locks. The CLI needs them to find lock directories (ls), to show
// names without their guids, and to tell the family of a node.

const (
	guidRE = `[0-9a-f]{32}`
	uuidRE = `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`
	seqRE  = `(?:\d{10}|-\d{9,10})`
)

// lockNodeName matches the name of a lock node of any family. The walk of
// ls uses it to find lock directories and to skip lock nodes, which are
// ephemeral and so have no children to list.
var lockNodeName = regexp.MustCompile(`^(?:` +
	`(?:_c_` + guidRE + `-)?(?:read|write)-` + // zkrwlock, native
	`|_c_` + guidRE + `-(?:__READ__|__WRIT__|rlock-|wlock-|lock-|__rlock__|__lock__|read__lock__)` + // zkrwlock's dialects, zk.Lock
	`|_c_` + uuidRE + `-(?:__READ__|__WRIT__|lock-)` + // Curator
	`|` + guidRE + `(?:__rlock__|__lock__)` + // kazoo
	`)` + seqRE + `$`)

// tokenAndSeq finds the mode token and the number at the end of a name.
// Where one token ends another (read__lock__, __lock__), the leftmost,
// longer one wins.
var tokenAndSeq = regexp.MustCompile(`(?:read__lock__|__rlock__|__lock__|__READ__|__WRIT__|rlock-|wlock-|lock-|read-|write-)` +
	seqRE + `$`)

// zkLockName is a node of go-zookeeper's zk.Lock (Curator's mutex has a
// uuid where it has a guid).
var zkLockName = regexp.MustCompile(`^_c_` + guidRE + `-lock-` + seqRE + `$`)

// nodeName is a lock node's name without the directory and without the
// client's guid: write-0000000007, __WRIT__0000000008.
func nodeName(node string) string {
	base := path.Base(node)
	if loc := tokenAndSeq.FindStringIndex(base); loc != nil && loc[0] > 0 {
		return base[loc[0]:]
	}
	return base
}

// family names who made a node, for the FAMILY column: zkrwlock, in its
// dialect when that is not the native one (zkrwlock/curator), or the peer
// library (curator, curator-mutex, zk.Lock, kazoo; native for zkrwlock's
// old unprotected names).
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
		if zkLockName.MatchString(path.Base(e.Node)) {
			return "zk.Lock"
		}
		return "curator-mutex"
	}
	return e.Family.String()
}

// dialects are the values of --dialect.
var dialects = []rwlock.Dialect{
	rwlock.DialectNative, rwlock.DialectCurator, rwlock.DialectMutex, rwlock.DialectKazoo, rwlock.DialectKazooLock,
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
	`kazoo (kazoo ReadLock/WriteLock); kazoo-lock (kazoo Lock). Every zkrwlock client of a path must use the same one`

func (f *dialectFlag) register(fs *flag.FlagSet) {
	fs.Var(f, "dialect", dialectHelp)
}
