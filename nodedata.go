package rwlock

import (
	"bytes"
	"strings"
)

// Lock node data is for people first: `zkCli get` on a node prints
//
//	owner=build-7:4242
//
// and, once a write grant has been downgraded,
//
//	owner=build-7:4242
//	mode=read
//
// Readers that meet a write- node read that second line: a downgraded
// writer no longer blocks them (see Grant.Downgrade).
const (
	ownerKey   = "owner="
	sharedLine = "mode=read\n"
)

func encodeNodeData(owner string, shared bool) []byte {
	b := make([]byte, 0, len(ownerKey)+len(owner)+1+len(sharedLine))
	b = append(b, ownerKey...)
	b = append(b, owner...)
	b = append(b, '\n')
	if shared {
		b = append(b, sharedLine...)
	}
	return b
}

// downgraded reports whether a write- node's data marks it shared.
func downgraded(data []byte) bool {
	return bytes.HasPrefix(data, []byte(sharedLine)) || bytes.Contains(data, []byte("\n"+sharedLine))
}

// ownerOf returns who holds a node: the owner line, or, for a node some
// other client made, its data as text.
func ownerOf(data []byte) string {
	s := string(data)
	for line := range strings.Lines(s) {
		if owner, ok := strings.CutPrefix(line, ownerKey); ok {
			return strings.TrimSuffix(owner, "\n")
		}
	}
	return strings.TrimSpace(s)
}
