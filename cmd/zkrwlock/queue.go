package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/lockname"
)

const queueUsage = `Usage: zkrwlock queue [flags] PATH

Shows who holds the lock whose directory is PATH and who waits for it:
holders first, then waiters, in queue order.

  MODE   STATE    FAMILY    OWNER          SESSION             AGE   LIMIT  NODE
  read   held     zkrwlock  build-7:4242   0x10000a1b2c30001   3.2s  1m00s  read-0000000003
  write  waiting  curator   10.0.0.7       0x10000a1b2c30002   1.0s  -      __WRIT__0000000004

AGE is the time since the node was created (queued), by the server's clock.
On a bounded lock (exec --limit), MODE is the node's permits of the
capacity, as 2/4, and a line under the table says how many permits are in
use and the weights of the waiters, in queue order.
LIMIT is the hold limit of the lock that made the node (--max-hold,
WithMaxHold), from its data; "-" for none. A grant ends at LIMIT after it
was granted, by its holder's clock, so not before AGE reaches LIMIT.
OWNER is cut to 40 characters, and characters a terminal would not print
as they are (control characters, escape sequences) are shown escaped
(\t, \x1b, \u202e), here and in 'zkrwlock ls'; --json has them whole.
FAMILY is who made the node: zkrwlock (zkrwlock/DIALECT in another dialect
than the native one), or another library sharing the lock: curator,
curator-mutex, zk.Lock, kazoo. Their OWNER is their node's data as text
(Curator: the client's address; kazoo: its identifier), and their MODE is
what their node's name says: zk.Lock and curator-mutex nodes are writers.
With --dialect, a warning says when nodes of a library that does not see
that dialect's names are on PATH. kazoo's locks count native names only
when made with extra_lock_patterns, which their nodes do not show: so
they are taken not to, and their nodes beside native ones are blind,
unless --dialect kazoo-patterns declares that they do.

%FLAGS%
--json prints one JSON array, one object per node, in the same order, with
these fields: node (full path), name, mode ("read" or "write"), held,
owner, session_id (hex string "0x..."), seq, created (RFC 3339),
age_seconds, family (as FAMILY), peer (true for another library's node),
blind (true for a peer's node whose library does not count some other node
on PATH: exclusion between them is not guaranteed; a line under the table
says so; a peer's held is judged by its library's own rules),
max_hold_seconds (as LIMIT; absent for none), weight and capacity (a
bounded lock's node: its permits and the lock's capacity; absent for
others), and, for a holder that a
revocation ('zkrwlock revoke') asks to let go, revoked (true),
revoke_reason, revoke_by and revoke_age_seconds (since the revocation was
written, by the server's clock), and, for a node that 'LockAll' made with
others at once, set (the other locks of its set that its data names) and
set_size (how many locks the set has; more than named for a big set),
and cached (true for a node of a lock made with WithCaching, which its
process may keep after its release while nobody else wants the lock: a
holder's STATE is then "cached", whether busy or kept idle).
Under the table, a line for each such node names its set. Such a holder's STATE is "revoked" in
the table, which ends with the revocation's age, author and reason.
A lock nobody holds prints [].

` + exitCodes

// queueEntry is the JSON form of a queue entry. Its field names are stable.
type queueEntry struct {
	Node       string    `json:"node"`
	Name       string    `json:"name"`
	Mode       string    `json:"mode"`
	Held       bool      `json:"held"`
	Owner      string    `json:"owner"`
	SessionID  string    `json:"session_id"`
	Seq        int32     `json:"seq"`
	Created    time.Time `json:"created"`
	AgeSeconds float64   `json:"age_seconds"`
	Family     string    `json:"family"`
	Peer       bool      `json:"peer"`
	// Blind: a peer's node whose library does not count some other node
	// on the path, so that exclusion between them is not guaranteed.
	Blind bool `json:"blind,omitempty"`
	// MaxHoldSeconds is the node's hold limit; 0 (absent) for none.
	MaxHoldSeconds float64 `json:"max_hold_seconds,omitempty"`
	// Set and SetSize: the node's set (rwlock.Entry's); absent for none.
	Set     []string `json:"set,omitempty"`
	SetSize int      `json:"set_size,omitempty"`
	// Weight and Capacity: a bounded lock's node's permits and the lock's
	// capacity (exec --limit); absent for other nodes.
	Weight   int64 `json:"weight,omitempty"`
	Capacity int64 `json:"capacity,omitempty"`
	// Cached is true for a node of a caching lock (WithCaching).
	Cached bool `json:"cached,omitempty"`
	// Revoked: a revocation ('zkrwlock revoke') asks this holder to let go.
	Revoked          bool     `json:"revoked,omitempty"`
	RevokeReason     string   `json:"revoke_reason,omitempty"`
	RevokeBy         string   `json:"revoke_by,omitempty"`
	RevokeAgeSeconds *float64 `json:"revoke_age_seconds,omitempty"` // a pointer: 0 is an age
}

// pendingRevocation is a revocation of the lock that names holders still
// in the queue.
type pendingRevocation struct {
	reason, by string
	at         time.Time
	nodes      []int32
}

func (r *pendingRevocation) names(e rwlock.Entry) bool {
	return r != nil && e.Held && slices.Contains(r.nodes, e.Seq)
}

// readRevocation reads the revocation in the lock directory's data, if any
// holder it names is still in q.
func readRevocation(conn *zk.Conn, path string, q []rwlock.Entry) *pendingRevocation {
	data, stat, err := conn.Get(path)
	if err != nil {
		return nil
	}
	rev, ok := lockname.ParseRevocation(data)
	if !ok {
		return nil
	}
	r := &pendingRevocation{reason: rev.Reason, by: rev.By, at: time.UnixMilli(stat.Mtime), nodes: rev.Names(stat.Czxid)}
	if !slices.ContainsFunc(q, r.names) {
		return nil
	}
	return r
}

func runQueue(std stdio, args []string) int {
	const prog = "zkrwlock queue"
	var conn connFlags
	var asJSON bool
	var dialect dialectFlag
	fs := newFlagSet("queue")
	fs.BoolVar(&asJSON, "json", false, "print a JSON array instead of a table")
	dialect.register(fs)
	conn.register(fs)
	path, err := parsePath(std, fs, queueUsage, args, &conn)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err == nil {
		var d *rwlock.Dialect // warnings only for a dialect asked for: queue itself queues nothing
		if given(fs)["dialect"] {
			d = &dialect.d
		}
		err = showQueue(std, &conn, path, d, asJSON)
	}
	if err != nil {
		return report(std.err, prog, err)
	}
	return 0
}

// parsePath parses the arguments of a command that takes one lock PATH
// and no more: queue, revoke.
func parsePath(std stdio, fs *flag.FlagSet, usage string, args []string, conn *connFlags) (string, error) {
	pos, rest, err := parse(std.out, fs, usage, args, 1)
	switch {
	case err != nil:
		return "", err
	case len(pos) == 0:
		return "", fail(exitUsage, "missing lock PATH")
	case len(rest) > 0:
		return "", fail(exitUsage, "unexpected argument %q", rest[0])
	}
	if err := conn.validate(); err != nil {
		return "", err
	}
	return pos[0], checkPath(pos[0])
}

func showQueue(std stdio, cf *connFlags, path string, dialect *rwlock.Dialect, asJSON bool) error {
	log := cf.logger(std.err)
	opts := []rwlock.Option{rwlock.WithLogger(log)}
	if dialect != nil {
		opts = []rwlock.Option{rwlock.WithLogger(cf.lockLogger(std.err, "zkrwlock queue")), rwlock.WithDialect(*dialect)}
	}
	ctx, conn, stop, done, err := cf.dialInterruptible()
	if err != nil {
		return err
	}
	defer done()
	l, err := rwlock.New(conn, path, opts...)
	if err != nil {
		return &failure{exitUsage, err}
	}
	// A session that lives is enough for a read; bound it anyway.
	qctx, cancel := context.WithTimeout(ctx, cf.sessionTimeoutNow())
	defer cancel()
	q, err := l.Queue(qctx)
	if sig := stop(); sig != nil {
		return interruptedErr(sig, "while reading the queue")
	}
	if err != nil {
		return cf.zkFail(err, "read the queue of %s", path)
	}
	now := time.Now()
	rev := readRevocation(conn, path, q)
	if asJSON {
		return writeJSON(std.out, q, rev, now)
	}
	return writeTable(std.out, path, q, rev, now)
}

func writeJSON(w io.Writer, q []rwlock.Entry, rev *pendingRevocation, now time.Time) error {
	out := make([]queueEntry, 0, len(q))
	for _, e := range q {
		je := jsonEntry(e, now)
		if rev.names(e) {
			a := age(now, rev.at).Seconds()
			je.Revoked, je.RevokeReason, je.RevokeBy, je.RevokeAgeSeconds = true, rev.reason, rev.by, &a
		}
		out = append(out, je)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func jsonEntry(e rwlock.Entry, now time.Time) queueEntry {
	return queueEntry{
		Node:       e.Node,
		Name:       nodeName(e.Node),
		Mode:       e.Mode.String(),
		Held:       e.Held,
		Owner:      e.Owner,
		SessionID:  sessionHex(e.SessionID),
		Seq:        e.Seq,
		Created:    e.Created.UTC(),
		AgeSeconds: age(now, e.Created).Seconds(),
		Family:     family(e),
		Peer:       e.Peer,
		Blind:      e.Blind,

		MaxHoldSeconds: e.MaxHold.Seconds(),
		Set:            e.Set,
		SetSize:        e.SetSize,
		Weight:         e.Weight,
		Capacity:       e.Capacity,
		Cached:         e.Cached,
	}
}

func writeTable(w io.Writer, path string, q []rwlock.Entry, rev *pendingRevocation, now time.Time) error {
	if len(q) == 0 {
		_, err := fmt.Fprintf(w, "%s: no holders, no waiters\n", printable(path))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODE\tSTATE\tFAMILY\tOWNER\tSESSION\tAGE\tLIMIT\tNODE")
	for _, e := range q {
		state := "waiting"
		switch {
		case rev.names(e):
			state = "revoked" // still held, asked to let go
		case e.Held && e.Cached:
			state = "cached" // held, or kept by its process while nobody wants it
		case e.Held:
			state = "held"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", permitMode(e), state, family(e), ownerText(e.Owner),
			sessionHex(e.SessionID), formatAge(age(now, e.Created)), limitText(e.MaxHold), printable(nodeName(e.Node)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, e := range q {
		if err := writeSet(w, printable(nodeName(e.Node))+": ", e); err != nil {
			return err
		}
	}
	if err := writeMixed(w, "", q); err != nil {
		return err
	}
	if line := permitsLine(q); line != "" {
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return rev.write(w, "", now)
}

// writeMixed prints, after prefix, the line that says exclusion is not
// guaranteed on a path where a peer does not count every node; nothing
// otherwise.
func writeMixed(w io.Writer, prefix string, q []rwlock.Entry) error {
	var blind []string
	for _, e := range q {
		if f := family(e); e.Blind && !slices.Contains(blind, f) {
			blind = append(blind, f)
		}
	}
	if len(blind) == 0 {
		return nil
	}
	_, err := fmt.Fprintf(w, "%sexclusion not guaranteed: not every library here counts every node (%s do not): "+
		"a mixed fleet, where every client of a path needs the dialect of its peers\n", prefix, strings.Join(blind, ", "))
	return err
}

// write prints the revocation's line under a table, after prefix; nothing
// for none.
func (r *pendingRevocation) write(w io.Writer, prefix string, now time.Time) error {
	if r == nil {
		return nil
	}
	_, err := fmt.Fprintf(w, "%srevoked %s ago by %s: %s\n", prefix, formatAge(age(now, r.at)), printable(r.by), printable(r.reason))
	return err
}

// writeSet prints, after prefix, the line that names e's set; nothing for
// a node in no set.
func writeSet(w io.Writer, prefix string, e rwlock.Entry) error {
	if e.SetSize == 0 {
		return nil
	}
	names := make([]string, len(e.Set))
	for i, p := range e.Set {
		names[i] = printable(p)
	}
	more := ""
	if n := e.SetSize - 1 - len(e.Set); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	_, err := fmt.Fprintf(w, "%sin a set of %d with %s%s\n", prefix, e.SetSize, strings.Join(names, ", "), more)
	return err
}

// limitText is a hold limit in a table: "-" for none.
func limitText(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return formatAge(d)
}

func sessionHex(id int64) string { return fmt.Sprintf("0x%x", uint64(id)) }

// age is how long ago created was, never negative (the server's clock may
// run ahead of ours).
func age(now, created time.Time) time.Duration {
	return max(now.Sub(created), 0)
}

// formatAge prints 850ms as 0.8s, 75s as 1m15s, 2h3m as 2h03m and 50h as 2d02h.
func formatAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}
