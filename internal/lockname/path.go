package lockname

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxPath bounds a lock directory's path. ZooKeeper refuses any packet
// larger than jute.maxbuffer (1 MiB by default) by closing the connection,
// which a client takes for a connection loss and retries; the longest
// request the lock sends carries its node's path twice (the held mark's
// transaction) and its data. No real path comes near the bound.
const maxPath = 64 << 10

// CheckPath says why path cannot be a lock directory, or returns nil:
// ZooKeeper's own rules (absolute, no trailing slash, no empty or relative
// segments, no control characters), and the lock's: a lock needs a
// directory of its own, so not the root, nothing under /zookeeper, which
// the server reserves, and at most 64 KiB, far below the server's packet
// limit.
func CheckPath(path string) error {
	bad := func(why string) error { return fmt.Errorf("%q: %s", shorten(path), why) }
	switch {
	case path == "":
		return bad("empty")
	case len(path) > maxPath:
		return bad(fmt.Sprintf("%d bytes long, more than %d", len(path), maxPath))
	case path[0] != '/':
		return bad("must start with /")
	case path == "/":
		return bad("the root cannot be a lock directory")
	case strings.HasSuffix(path, "/"):
		return bad("must not end with /")
	case path == "/zookeeper" || strings.HasPrefix(path, "/zookeeper/"):
		return bad("/zookeeper is reserved by the server")
	case !utf8.ValidString(path):
		return bad("not valid UTF-8")
	}
	for _, seg := range strings.Split(path[1:], "/") {
		switch seg {
		case "":
			return bad("empty segment")
		case ".", "..":
			return bad("relative segment")
		}
	}
	for _, r := range path {
		if r == 0 || r < 0x20 || 0x7f <= r && r <= 0x9f || 0xd800 <= r && r <= 0xf8ff || 0xfff0 <= r {
			return bad(fmt.Sprintf("invalid character %U", r))
		}
	}
	return nil
}

// shorten keeps an error about a huge path readable.
func shorten(path string) string {
	if len(path) <= 80 {
		return path
	}
	return path[:60] + "…" + path[len(path)-10:]
}
