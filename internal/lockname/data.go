package lockname

import (
	"bytes"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Lock node data is for people first. `zkCli get` on a node prints:
//
//	owner=build-7:4242
//	max-hold=30s
//
// max-hold is the lock's hold limit, set by WithMaxHold, and present only
// for a lock that has one. It is the duration, not the instant the grant
// ends. The limit counts from the grant, on the holder's monotonic clock.
// The instant is known only at the grant. Writing it would cost a request
// more, and it would be read against other machines' clocks. The duration
// is known before the create, and rides on it. A reader bounds the end by
// the node's ctime, by the server's clock, plus the limit. The grant comes
// at or after the create.
//
// Only the node's holder ever changes it, with one of two marks:
//
//	owner=build-7:4242
//	state=held
//	mode=read
//
// A writer that waited sets state=held as it releases, in the
// transaction that deletes the node. So the writer behind learns that
// every node before it is gone, and needs no new listing. The mark
// mode=read says the write grant was downgraded, so readers no longer
// wait for it.
//
// Either mark proves that the node held the lock. So does any change of a
// lock node's data, since only holders make one. A writer marks when it
// can. A release whose mark could not be written deletes the node
// plainly, and so does a release that ended in the background. Then the
// writer behind lists once.
//
// All of this holds for zkrwlock's own nodes only, as Node.Ours tells. A
// peer's data is never read for marks. Do not write lock node data by
// hand, nor through another lock's Grant.Multi. A forged change lets
// waiters in.
const (
	ownerKey       = "owner="
	maxHoldKey     = "max-hold="
	heldLine       = "state=held\n"
	downgradedLine = "mode=read\n"
	cachedLine     = "cache=on\n"
)

// A Mark is a holder's change of its node's data. It is none, or a set
// of the marks below.
type Mark uint8

const (
	MarkHeld       Mark = 1 << iota // state=held: written as a waiting writer's node goes
	MarkDowngraded                  // mode=read: the write grant was downgraded
	MarkCached                      // cache=on: made by a lock that may keep it after its release, written at the create

	Unmarked Mark = 0
)

// Data is the data of a node of owner's, with marks, under a hold limit
// of maxHold. A maxHold of 0 means none.
func Data(owner string, maxHold time.Duration, marks Mark) []byte {
	b := make([]byte, 0, len(ownerKey)+len(owner)+1+len(maxHoldKey)+24+len(heldLine)+len(downgradedLine))
	b = append(b, ownerKey...)
	b = append(b, owner...)
	b = append(b, '\n')
	if maxHold > 0 {
		b = append(b, maxHoldKey...)
		b = append(b, maxHold.String()...)
		b = append(b, '\n')
	}
	if marks&MarkHeld != 0 {
		b = append(b, heldLine...)
	}
	if marks&MarkDowngraded != 0 {
		b = append(b, downgradedLine...)
	}
	if marks&MarkCached != 0 {
		b = append(b, cachedLine...)
	}
	return b
}

// Cached reports whether a node's data says its lock may keep it after its
// release (the lock's WithCaching).
func Cached(data []byte) bool { return hasLine(data, cachedLine) }

// Downgraded reports whether a write node's data marks it downgraded.
func Downgraded(data []byte) bool { return hasLine(data, downgradedLine) }

// Held reports whether a node's data proves that it held the lock.
func Held(data []byte) bool { return hasLine(data, heldLine) || Downgraded(data) }

func hasLine(data []byte, line string) bool {
	return bytes.HasPrefix(data, []byte(line)) || bytes.Contains(data, []byte("\n"+line))
}

// MaxHold returns the hold limit a node's data carries. It returns 0 for
// none, and for a line that does not parse as a positive duration.
func MaxHold(data []byte) time.Duration {
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, maxHoldKey); ok {
			d, err := time.ParseDuration(strings.TrimSuffix(v, "\n"))
			if err != nil || d < 0 {
				return 0
			}
			return d
		}
	}
	return 0
}

// Owner returns who holds a node, as the owner line tells. For a node
// some other client made, it returns the node's data as text.
func Owner(data []byte) string {
	s := string(data)
	for line := range strings.Lines(s) {
		if owner, ok := strings.CutPrefix(line, ownerKey); ok {
			return strings.TrimSuffix(owner, "\n")
		}
	}
	return strings.TrimSpace(s)
}

// The lock directory's own data is one format: lines of key=value, one
// record per purpose. A record is the lines whose keys its purpose owns.
// A reader acts on its own record only, and skips every other line. A
// writer replaces its own record's lines and keeps the rest, by a write
// conditional on the version it read, so purposes never erase each other.
// Revocation is the only purpose today. Its record comes first, its lines
// in the order below, since clients before this format read them by place.
// Those clients take any change of the data for a revocation. So a record
// of another purpose reaches them as a revocation with no reason. That is
// safe, since a revocation changes no grant; it is only a false alarm.
//
// A revocation adds no child, so peers and waiters never see it. It
// names the nodes that held the lock when it was asked for, by sequence
// number, so that grants made later are not revoked. It also names the
// directory they were listed in, by its czxid, since sequence numbers
// start again in a directory made anew. Its id tells one request from
// another, so a reader knows its record changed even when the words did
// not. The server's time of the write is the directory's mtime.
//
//	revoke=the migration is stuck
//	by=ops-host:311
//	nodes=17,18
//	dir=4294967302
//	id=5f0c2a9e7b3d4410
const (
	revokeKey = "revoke="
	byKey     = "by="
	nodesKey  = "nodes="
	dirKey    = "dir="
	idKey     = "id="
)

// revocationKeys are the keys of the revocation record.
var revocationKeys = []string{revokeKey, byKey, nodesKey, dirKey, idKey}

// maxReason bounds a revocation's reason, since it travels to every
// holder.
const maxReason = 1 << 10

// A Revocation asks the holders of Nodes to let go, for Reason, on behalf
// of By. Nodes are sequence numbers in the directory whose czxid is Dir.
// ID is the request's, the same in both of a Revoke's writes.
type Revocation struct {
	Reason, By string
	Nodes      []int32
	Dir        int64  // 0: not known (none listed yet, or an older writer)
	ID         string // "": an older writer
}

// Data returns the revocation record that carries r.
func (r Revocation) Data() []byte {
	reason := strings.Join(strings.Fields(r.Reason), " ") // one line
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	b := []byte(revokeKey + reason + "\n" + byKey + strings.Join(strings.Fields(r.By), " ") + "\n" + nodesKey)
	for i, seq := range r.Nodes {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(seq), 10)
	}
	b = append(b, '\n')
	if r.Dir != 0 {
		b = strconv.AppendInt(append(b, dirKey...), r.Dir, 10)
		b = append(b, '\n')
	}
	if id := strings.Join(strings.Fields(r.ID), ""); id != "" {
		b = append(append(append(b, idKey...), id...), '\n')
	}
	return b
}

// WithRevocation returns the directory data data with its revocation
// record replaced by r's. Every other record's lines are kept, after it.
func WithRevocation(data []byte, r Revocation) []byte {
	b := r.Data()
	for line := range strings.Lines(string(data)) {
		if !isRevocationLine(line) && strings.TrimSpace(line) != "" {
			b = append(b, line...)
			if !strings.HasSuffix(line, "\n") {
				b = append(b, '\n')
			}
		}
	}
	return b
}

func isRevocationLine(line string) bool {
	for _, k := range revocationKeys {
		if strings.HasPrefix(line, k) {
			return true
		}
	}
	return false
}

// ParseRevocation reads the revocation record in directory data. It
// returns ok == false where there is none, or it is malformed. Lines of
// other records are skipped.
func ParseRevocation(data []byte) (r Revocation, ok bool) {
	var seen [3]bool // revoke=, by=, nodes=
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, revokeKey):
			r.Reason, seen[0] = strings.TrimPrefix(line, revokeKey), true
		case strings.HasPrefix(line, byKey):
			r.By, seen[1] = strings.TrimPrefix(line, byKey), true
		case strings.HasPrefix(line, nodesKey):
			seen[2] = true
			nodes := strings.TrimPrefix(line, nodesKey)
			if nodes == "" { // names nobody
				continue
			}
			for f := range strings.SplitSeq(nodes, ",") {
				seq, err := strconv.ParseInt(f, 10, 32)
				if err != nil {
					return Revocation{}, false
				}
				r.Nodes = append(r.Nodes, int32(seq))
			}
		case strings.HasPrefix(line, dirKey):
			czxid, err := strconv.ParseInt(strings.TrimPrefix(line, dirKey), 10, 64)
			if err != nil {
				return Revocation{}, false
			}
			r.Dir = czxid
		case strings.HasPrefix(line, idKey):
			r.ID = strings.TrimPrefix(line, idKey)
		}
	}
	if seen != [3]bool{true, true, true} {
		return Revocation{}, false
	}
	return r, true
}

// SameRevocation reports whether two directory data carry the same
// revocation record, or both none. A reader acts only when it changed.
func SameRevocation(a, b []byte) bool {
	ra, oka := ParseRevocation(a)
	rb, okb := ParseRevocation(b)
	return oka == okb && bytes.Equal(ra.Data(), rb.Data())
}

// Names returns the nodes r names, if it was written for the directory
// whose czxid is dir. It does so too if r does not say which.
func (r Revocation) Names(dir int64) []int32 {
	if r.Dir != 0 && r.Dir != dir {
		return nil
	}
	return r.Nodes
}

// A node that LockAll made carries its set in its data. The transaction
// that creates the set writes it, at no request more:
//
//	set-size=3
//	set=/locks/b
//	set=/locks/c
//
// set-size counts every member, this node's lock included. The set=
// lines name the other members' lock directories, one a line. ZooKeeper
// paths hold no newline. Only the first maxSetShown are named, so that a
// set of many locks keeps each node's data small.
const (
	setSizeKey  = "set-size="
	setKey      = "set="
	maxSetShown = 8
)

// InSet returns data followed by the set lines of the member at index self
// of a set whose lock directories are paths.
func InSet(data []byte, paths []string, self int) []byte {
	b := append(slices.Clip(data), setSizeKey...)
	b = strconv.AppendInt(b, int64(len(paths)), 10)
	b = append(b, '\n')
	shown := 0
	for i, p := range paths {
		if i == self || shown == maxSetShown {
			continue
		}
		b = append(b, setKey...)
		b = append(b, p...)
		b = append(b, '\n')
		shown++
	}
	return b
}

// Set returns the other members' lock directories and the size of the
// set that a node's data names. The size is 0 for a node in no set, and
// for data whose set-size does not parse or is less than the members it
// names.
func Set(data []byte) (others []string, size int) {
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSuffix(line, "\n")
		if v, ok := strings.CutPrefix(line, setSizeKey); ok && size == 0 {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, 0
			}
			size = n
		} else if p, ok := strings.CutPrefix(line, setKey); ok && size > 0 && len(others) < maxSetShown {
			others = append(others, p)
		}
	}
	if len(others) >= size {
		return nil, 0
	}
	return others, size
}

// An election's node carries its leader's value in a line of its own. The
// create writes it, and the leader's Proclaim rewrites it, at no request
// more than the change itself:
//
//	owner=build-7:4242
//	value=MTAuMC4wLjc6ODA4MA==
//
// The value is arbitrary bytes, so the line spells it in standard base64.
// Base64 has no newline, and no line of it can pass for a mark. So
// `zkCli get` still shows one key per line, and Held and Downgraded never
// mistake a value for a mark.
const valueKey = "value="

// MaxValue bounds a leader's value. Every observer reads it at each change,
// and ZooKeeper caps a node's data at jute.maxbuffer, 1 MiB by default.
const MaxValue = 64 << 10

// ValueLine returns the line that carries v.
func ValueLine(v []byte) []byte {
	b := make([]byte, 0, len(valueKey)+base64.StdEncoding.EncodedLen(len(v))+1)
	b = append(b, valueKey...)
	b = base64.StdEncoding.AppendEncode(b, v)
	return append(b, '\n')
}

// Elected reports whether a node's data carries a value line: the node is
// a campaign's, and its leader may change its data while it holds.
func Elected(data []byte) bool { return hasLine(data, valueKey) }

// Value returns the value a node's data carries. It reports false for data
// with no value line, or one that does not decode.
func Value(data []byte) ([]byte, bool) {
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, valueKey); ok {
			b, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(v, "\n"))
			if err != nil {
				return nil, false
			}
			return b, true
		}
	}
	return nil, false
}
