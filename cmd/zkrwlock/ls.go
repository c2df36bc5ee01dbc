package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/go-zookeeper/zk"
	"golang.org/x/sync/errgroup"

	"github.com/zkrwlock/rwlock"
)

const lsUsage = `Usage: zkrwlock ls [flags] PREFIX

Lists the locks under PREFIX (PREFIX itself included; / for all): every
directory that holds lock nodes, with what is held, since when, and how
long the longest wait has lasted. Stuck locks come first.

  LOCK           MODE   HOLDERS  HELD   LIMIT  OWNER         WAITERS  WAITING  FAMILY                FLAG
  /locks/schema  write  1        2h03m  -      build-7:4242  3        1h58m    zkrwlock              stuck
  /locks/report  read   2        1h10m  2h00m  cron-3:991    0        -        zkrwlock              old
  /locks/config  read   4        12.0s  -      web-1:977     0        -        zkrwlock/kazoo,kazoo  -
  /locks/schema: revoked 5m02s ago by ops-1:311: the migration is stuck

HELD is the age of the oldest holder's node (OWNER is its owner): the time
since it joined the queue, by the server's clock, so it includes any time
it waited first. LIMIT is that holder's hold limit, as in 'zkrwlock
queue'. WAITING is the age of the oldest waiter's node: how long
the longest wait has lasted. FAMILY lists who has nodes there, in queue
order: zkrwlock, and the other libraries sharing the lock (see 'zkrwlock
queue --help'). Whether those libraries count every node is judged as
'zkrwlock queue' judges it: --dialect kazoo-patterns declares that kazoo's
locks under PREFIX count native names; the other dialects change nothing.

With --older-than D, a lock whose oldest holder is older than D is "old",
and "stuck" when others wait for it too; FLAG says so. Locks are sorted
stuck first, then by WAITING, then by HELD, longest first, then by path.
Under the table, a line for each lock whose oldest holder took it in a set
(LockAll) names the set, and a line for each lock whose holders a
revocation ('zkrwlock revoke') asks to let go says how long ago, by whom
and why, and a line for each bounded lock (exec --limit) says how many
permits are in use and the weights of its waiters, as 'zkrwlock queue'
does.

Locks nobody holds or waits for are not listed: nothing tells their empty
directories from other znodes, and ZooKeeper deletes them soon. A directory
whose ACL does not let this client list it (or a lock whose nodes it may
not read) is skipped, with a warning on stderr; --auth gets it in. OWNER and
LOCK are shown as in 'zkrwlock queue': OWNER cut to 40 characters, control
characters escaped.

%FLAGS%
--json prints one JSON array, one object per lock, in the same order, with
these fields: path, mode ("read" or "write"), holders, waiters (counts),
oldest_holder and oldest_waiter (objects as in 'zkrwlock queue --json', or
null), old and stuck (false without --older-than), families (as FAMILY, an
array), mixed (a peer there does not count every node: exclusion is not
guaranteed, and a line under the table says so), and revocation for a pending revocation (absent for none): reason,
by, requested (RFC 3339), age_seconds, and holders (the sequence numbers of
the nodes it asks to let go), and permits for a bounded lock (absent for
others): capacity, in_use and waiting (the waiters' weights, in queue
order). No locks prints [].

` + exitCodes

// lsParallel bounds the ZooKeeper requests of ls in flight at once (each
// Queue sends its own reads besides).
const lsParallel = 16

// lockInfo is what ls tells about one lock.
type lockInfo struct {
	path         string
	mode         rwlock.Mode
	holders      int
	waiters      int
	oldestHolder rwlock.Entry
	oldestWaiter *rwlock.Entry // nil without waiters
	held, waited time.Duration // the ages of those two; 0 for none
	old, stuck   bool
	families     []string           // who has nodes there, in queue order
	revocation   *pendingRevocation // nil for none
	queue        []rwlock.Entry     // for the line of a mixed fleet
	mixed        bool               // a peer there does not count every node: exclusion not guaranteed
}

// lockJSON is the JSON form of a lockInfo. Its field names are stable.
type lockJSON struct {
	Path         string      `json:"path"`
	Mode         string      `json:"mode"`
	Holders      int         `json:"holders"`
	Waiters      int         `json:"waiters"`
	OldestHolder queueEntry  `json:"oldest_holder"`
	OldestWaiter *queueEntry `json:"oldest_waiter"`
	Old          bool        `json:"old"`
	Stuck        bool        `json:"stuck"`
	Families     []string    `json:"families"`
	// Mixed: a peer there does not count every node of the lock, so that
	// exclusion is not guaranteed.
	Mixed bool `json:"mixed"`
	// Revocation is a pending revocation; absent for none.
	Revocation *revocationJSON `json:"revocation,omitempty"`
	// Permits are a bounded lock's (exec --limit); absent for others.
	Permits *permitsJSON `json:"permits,omitempty"`
}

// revocationJSON is the JSON form of a pending revocation.
type revocationJSON struct {
	Reason     string    `json:"reason"`
	By         string    `json:"by"`
	Requested  time.Time `json:"requested"`
	AgeSeconds float64   `json:"age_seconds"`
	Holders    []int32   `json:"holders"`
}

func jsonRevocation(r *pendingRevocation, now time.Time) *revocationJSON {
	if r == nil {
		return nil
	}
	return &revocationJSON{Reason: r.reason, By: r.by, Requested: r.at.UTC(), AgeSeconds: age(now, r.at).Seconds(), Holders: r.nodes}
}

type lsOptions struct {
	conn      connFlags
	dialect   dialectFlag
	asJSON    bool
	olderThan time.Duration
	flag      bool // --older-than was given
	prefix    string
}

func runLs(std stdio, args []string) int {
	const prog = "zkrwlock ls"
	var o lsOptions
	fs := newFlagSet("ls")
	fs.BoolVar(&o.asJSON, "json", false, "print a JSON array instead of a table")
	durationVar(fs, &o.olderThan, "older-than", 0, "flag locks whose oldest holder is older than this: "+
		"\"old\", and \"stuck\" when others wait")
	o.dialect.registerAs(fs, lsDialectHelp)
	o.conn.register(fs)
	pos, rest, err := parse(std.out, fs, lsUsage, args, 1)
	switch {
	case errors.Is(err, errHelp):
		return 0
	case err != nil:
	case len(pos) == 0:
		err = fail(exitUsage, "missing PREFIX")
	case len(rest) > 0:
		err = fail(exitUsage, "unexpected argument %q", rest[0])
	case o.olderThan < 0:
		err = fail(exitUsage, "--older-than must not be negative")
	default:
		o.prefix, o.flag = pos[0], given(fs)["older-than"]
		err = o.conn.validate()
	}
	if err == nil && o.prefix != "/" {
		err = checkPath(o.prefix)
	}
	if err == nil {
		err = o.list(std)
	}
	if err != nil {
		return report(std.err, prog, err)
	}
	return 0
}

// list finds the locks, reads their queues and prints them.
func (o *lsOptions) list(std stdio) error {
	log := o.conn.logger(std.err)
	ctx, conn, stop, done, err := o.conn.dialInterruptible()
	if err != nil {
		return err
	}
	defer done()

	var mu sync.Mutex
	warn := func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		printLine(std.err, "zkrwlock ls", "warning: "+msg)
	}
	timeout := o.conn.sessionTimeoutNow()
	dirs, err := findLockDirs(ctx, conn, o.prefix, timeout, warn)
	var locks []lockInfo
	if err == nil {
		locks, err = readLocks(ctx, conn, dirs, timeout, o.dialect.d, log, warn)
	}
	if sig := stop(); sig != nil {
		return interruptedErr(sig, "while reading the locks under %s", o.prefix)
	}
	if err != nil {
		return o.conn.zkFail(err, "list the locks under %s", o.prefix)
	}
	now := time.Now()
	for i := range locks {
		o.judge(&locks[i], now)
	}
	sortLocks(locks)
	if o.asJSON {
		return writeLocksJSON(std.out, locks, now)
	}
	return o.writeLocksTable(std.out, locks)
}

// findLockDirs walks the tree under prefix, prefix included, level by
// level with at most lsParallel listings at once, each within timeout, and
// returns the directories that have children named like lock nodes, in
// path order. /zookeeper, the server's own, is skipped, and so is, with a
// warning, a directory whose ACL does not let this client list it: one
// unreadable subtree must not hide every other lock from a monitor. An
// unreadable prefix is an error, though: there would be nothing to list.
func findLockDirs(ctx context.Context, conn *zk.Conn, prefix string, timeout time.Duration, warn func(string)) ([]string, error) {
	var dirs []string
	level := []string{prefix}
	for len(level) > 0 {
		next := make([][]string, len(level))
		isLock := make([]bool, len(level))
		eg, ectx := errgroup.WithContext(ctx)
		eg.SetLimit(lsParallel)
		for i, dir := range level {
			eg.Go(func() error {
				children, err := listChildren(ectx, conn, dir, timeout)
				if errors.Is(err, zk.ErrNoNode) {
					return nil // deleted meanwhile, or no such prefix
				}
				if errors.Is(err, zk.ErrNoAuth) && dir != prefix {
					warn(fmt.Sprintf("skipped %s: its ACL does not let this client list it (authenticate with --auth to see the locks under it)",
						printable(dir)))
					return nil
				}
				if err != nil {
					return fmt.Errorf("list %s: %w", dir, err)
				}
				for _, c := range children {
					switch {
					case isLockNode(c):
						isLock[i] = true
					case dir == "/" && c == "zookeeper":
					default:
						next[i] = append(next[i], childPath(dir, c))
					}
				}
				return nil
			})
		}
		if err := eg.Wait(); err != nil {
			return nil, err
		}
		for i, dir := range level {
			if isLock[i] {
				dirs = append(dirs, dir)
			}
		}
		level = slices.Concat(next...)
	}
	slices.Sort(dirs)
	return dirs, nil
}

// listChildren lists dir, giving up after timeout or when ctx ends:
// go-zookeeper's requests have no deadline, and one sent while the server
// is gone waits until it is back. An abandoned request ends when the
// connection is closed.
func listChildren(ctx context.Context, conn *zk.Conn, dir string, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		names []string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		names, _, err := conn.Children(dir)
		done <- result{names, err}
	}()
	select {
	case r := <-done:
		return r.names, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("no answer from ZooKeeper: %w", ctx.Err())
	}
}

func childPath(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// readLocks reads the queue of each directory, at most lsParallel at once,
// each within timeout, and returns the locks that have nodes still. A lock
// whose nodes this client may not read is skipped with a warning. d is
// the zkrwlock clients' dialect: it says whether kazoo's locks count
// native names (DialectKazooPatterns), which no name shows.
func readLocks(ctx context.Context, conn *zk.Conn, dirs []string, timeout time.Duration, d rwlock.Dialect, log *slog.Logger,
	warn func(string)) ([]lockInfo, error) {
	queues := make([][]rwlock.Entry, len(dirs))
	revocations := make([]*pendingRevocation, len(dirs))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(lsParallel)
	for i, dir := range dirs {
		eg.Go(func() error {
			l, err := rwlock.New(conn, dir, rwlock.WithLogger(log), rwlock.WithDialect(d))
			if err != nil {
				return err
			}
			qctx, cancel := context.WithTimeout(ectx, timeout)
			defer cancel()
			queues[i], err = l.Queue(qctx)
			if errors.Is(err, zk.ErrNoAuth) {
				warn(fmt.Sprintf("skipped the lock %s: its nodes' ACL does not let this client read them (authenticate with --auth)",
					printable(dir)))
				queues[i] = nil
				return nil
			}
			if err != nil {
				return fmt.Errorf("read the queue of %s: %w", dir, err)
			}
			if len(queues[i]) > 0 {
				revocations[i] = readRevocation(conn, dir, queues[i])
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	var locks []lockInfo
	for i, q := range queues {
		if len(q) > 0 { // else its nodes went between the walk and the read
			info := summarize(dirs[i], q)
			info.revocation = revocations[i]
			locks = append(locks, info)
		}
	}
	return locks, nil
}

// summarize counts the holders and waiters of a non-empty queue and finds
// the oldest of each.
func summarize(path string, q []rwlock.Entry) lockInfo {
	info := lockInfo{path: path, mode: q[0].Mode, oldestHolder: q[0], queue: q}
	for _, e := range q {
		info.mixed = info.mixed || e.Blind
		if f := family(e); !slices.Contains(info.families, f) {
			info.families = append(info.families, f)
		}
		if e.Held {
			info.holders++
			if e.Created.Before(info.oldestHolder.Created) {
				info.oldestHolder = e
			}
			continue
		}
		info.waiters++
		if info.oldestWaiter == nil || e.Created.Before(info.oldestWaiter.Created) {
			info.oldestWaiter = &e
		}
	}
	return info
}

// judge sets the ages of a lock's oldest holder and waiter, as of now, and
// flags it: old when its oldest holder is older than --older-than, stuck
// when it is old and others wait.
func (o *lsOptions) judge(info *lockInfo, now time.Time) {
	info.held = age(now, info.oldestHolder.Created)
	if info.oldestWaiter != nil {
		info.waited = age(now, info.oldestWaiter.Created)
	}
	info.old = o.flag && info.held >= o.olderThan
	info.stuck = info.old && info.waiters > 0
}

// sortLocks puts stuck locks first, then those waited for longest, then
// those held longest, then orders by path.
func sortLocks(locks []lockInfo) {
	slices.SortFunc(locks, func(a, b lockInfo) int {
		return cmp.Or(
			-cmp.Compare(btoi(a.stuck), btoi(b.stuck)),
			-cmp.Compare(a.waited, b.waited),
			-cmp.Compare(a.held, b.held),
			strings.Compare(a.path, b.path),
		)
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func writeLocksJSON(w io.Writer, locks []lockInfo, now time.Time) error {
	out := make([]lockJSON, 0, len(locks))
	for _, l := range locks {
		j := lockJSON{
			Path: l.path, Mode: l.mode.String(), Holders: l.holders, Waiters: l.waiters,
			OldestHolder: jsonEntry(l.oldestHolder, now), Old: l.old, Stuck: l.stuck, Families: l.families, Mixed: l.mixed,
			Revocation: jsonRevocation(l.revocation, now), Permits: permitsOf(l.queue),
		}
		if l.oldestWaiter != nil {
			e := jsonEntry(*l.oldestWaiter, now)
			j.OldestWaiter = &e
		}
		out = append(out, j)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// writeLocksTable prints the table; the FLAG column only with --older-than.
func (o *lsOptions) writeLocksTable(w io.Writer, locks []lockInfo) error {
	if len(locks) == 0 {
		_, err := fmt.Fprintf(w, "no locks under %s\n", printable(o.prefix))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "LOCK\tMODE\tHOLDERS\tHELD\tLIMIT\tOWNER\tWAITERS\tWAITING\tFAMILY"
	if o.flag {
		header += "\tFLAG"
	}
	fmt.Fprintln(tw, header)
	for _, l := range locks {
		waiting := "-"
		if l.oldestWaiter != nil {
			waiting = formatAge(l.waited)
		}
		mode := l.mode.String()
		if l.oldestHolder.Cached {
			mode += ",cached"
		}
		row := fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s", printable(l.path), mode, l.holders, formatAge(l.held),
			limitText(l.oldestHolder.MaxHold), ownerText(l.oldestHolder.Owner), l.waiters, waiting, strings.Join(l.families, ","))
		if o.flag {
			row += "\t" + flagText(l)
		}
		fmt.Fprintln(tw, row)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	now := time.Now()
	for _, l := range locks {
		if err := writeSet(w, printable(l.path)+": held ", l.oldestHolder); err != nil {
			return err
		}
	}
	for _, l := range locks {
		if err := writeMixed(w, printable(l.path)+": ", l.queue); err != nil {
			return err
		}
	}
	for _, l := range locks {
		if err := l.revocation.write(w, printable(l.path)+": ", now); err != nil {
			return err
		}
	}
	for _, l := range locks {
		if line := permitsLine(l.queue); line != "" {
			if _, err := fmt.Fprintf(w, "%s: %s\n", printable(l.path), line); err != nil {
				return err
			}
		}
	}
	return nil
}

func flagText(l lockInfo) string {
	switch {
	case l.stuck:
		return "stuck"
	case l.old:
		return "old"
	}
	return "-"
}
