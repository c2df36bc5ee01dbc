package lockname

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxPath bounds a lock directory's path. ZooKeeper refuses any packet
// larger than jute.maxbuffer, 1 MiB by default, by closing the connection.
// A client takes that for a connection loss, and retries. The longest
// request the lock sends is the held mark's transaction. It carries the
// node's path twice, and its data. No real path comes near the bound.
const maxPath = 64 << 10

// CheckPath says why path cannot be a lock directory, or returns nil. By
// ZooKeeper's own rules, the path must be absolute, with no trailing
// slash, no empty or relative segments and no control characters. By the
// lock's rules, a lock needs a directory of its own, so the path must not
// be the root. It must not be under /zookeeper, which the server reserves.
// And it must be at most 64 KiB, far below the server's packet limit.
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
