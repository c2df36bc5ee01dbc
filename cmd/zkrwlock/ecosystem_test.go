package main

import (
	"context"
	"encoding/json"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock"
	"github.com/zkrwlock/rwlock/internal/zktest"
)

// Tests of what an operator meets first: flag messages, credentials, ACLs,
// untrusted text in tables, addresses that are no ZooKeeper.

func TestFlagMessages(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want []string // each in the error line
		not  []string // none in it
	}{
		{"duration without a unit", []string{"exec", "--write", "--timeout", "30", "/locks/x", "--", "true"}, nil,
			[]string{`invalid value "30" for --timeout: want a duration with a unit, e.g. 30s`}, []string{"parse error", " -timeout"}},
		{"not a duration", []string{"ls", "--older-than", "soon", "/locks"}, nil,
			[]string{`invalid value "soon" for --older-than: want a duration with a unit, e.g. 30s`}, nil},
		{"unknown flag suggests", []string{"exec", "--write", "--wait", "/locks/x", "--", "true"}, nil,
			[]string{"unknown flag --wait; did you mean --no-wait?"}, []string{"flag provided"}},
		{"single dash spelled long", []string{"exec", "-read", "-wirte", "/locks/x", "--", "true"}, nil,
			[]string{"unknown flag --wirte; did you mean --write?"}, nil},
		{"typo", []string{"queue", "--sesion-timeout", "5s", "/locks/x"}, nil,
			[]string{"unknown flag --sesion-timeout; did you mean --session-timeout?"}, nil},
		{"nothing near", []string{"queue", "--xyzzy", "/locks/x"}, nil,
			[]string{"unknown flag --xyzzy (see zkrwlock queue --help)"}, []string{"did you mean"}},
		{"missing value", []string{"queue", "/locks/x", "--zk"}, nil,
			[]string{"--zk needs a value"}, nil},
		{"bad boolean", []string{"exec", "--write", "--no-wait=maybe", "/locks/x", "--", "true"}, nil,
			[]string{`invalid boolean value "maybe" for --no-wait`}, nil},
		{"URL", []string{"queue", "--zk", "http://127.0.0.1:2181", "/locks/x"}, nil,
			[]string{`--zk: server "http://127.0.0.1:2181": not a host:port address but a URL (http://)`}, []string{"chroot"}},
		{"URL in the environment", []string{"queue", "/locks/x"}, []string{"ZOOKEEPER_SERVERS=zk://a:2181,b:2181"},
			[]string{"ZOOKEEPER_SERVERS: server", "URL"}, nil},
		{"bad port", []string{"ls", "--zk", "127.0.0.1:99999", "/locks"}, nil,
			[]string{`port "99999" is not a number from 1 to 65535`}, nil},
		{"grace that does not fit", []string{"exec", "--write", "--grace", "10s", "/locks/x", "--", "true"}, nil,
			[]string{"--grace 10s does not fit --session-timeout 30s", "give --grace 1.775s or less, or --session-timeout 2m41.6s or more"}, nil},
		{"auth without a scheme", []string{"queue", "--auth", "alicesecret", "/locks/x"}, nil,
			[]string{"--auth: want SCHEME:CREDENTIALS, e.g. digest:alice:secret"}, []string{"alicesecret"}},
		{"auth from the environment", []string{"queue", "/locks/x"}, []string{"ZKRWLOCK_AUTH=digest"},
			[]string{"ZKRWLOCK_AUTH: want SCHEME:CREDENTIALS"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append([]string{"ZOOKEEPER_SERVERS=127.0.0.1:1"}, tc.env...) // closed: none may connect
			r := runIn(t, env, tc.args...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			requireOneLine(t, r.stderr)
			for _, w := range tc.want {
				require.Contains(t, r.stderr, w)
			}
			for _, n := range tc.not {
				require.NotContains(t, r.stderr, n)
			}
		})
	}
}

func TestGraceHelp(t *testing.T) {
	r := runIn(t, nil, "exec", "--help")
	require.Equal(t, 0, r.code)
	require.NotContains(t, r.stdout, "2562047h", "the stand-in for 'as long as the lock allows' is not shown")
	require.Equal(t, 1, strings.Count(r.stdout, "(default: that much"), r.stdout)
	require.Contains(t, r.stdout, "--timeout duration")
	require.Contains(t, r.stdout, `see "Server loss is ridden out" in docs/guarantees.md`)
	require.NotContains(t, r.stdout, "three quarters less")
}

func TestSuggestFlag(t *testing.T) {
	fs := newFlagSet("x")
	for _, n := range []string{"write", "read", "no-wait", "timeout", "session-timeout", "connect-timeout", "zk", "json"} {
		fs.Bool(n, false, "")
	}
	for name, want := range map[string]string{
		"wirte": "write", "raed": "read", "wait": "no-wait", "nowait": "no-wait", "time-out": "timeout",
		"sessiontimeout": "session-timeout", "zkk": "zk", "jsn": "json", "exclusive": "", "x": "",
	} {
		require.Equal(t, want, suggestFlag(fs, name), name)
	}
}

// An address that takes connections and never answers (a black hole, a
// port of something else that waits for its client to speak first): no
// overrun of --connect-timeout, and a message that says what happened.
func TestBlackholeConnectTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})

	const connectTimeout = 1500 * time.Millisecond
	for _, args := range [][]string{
		{"queue", "/locks/x"},
		{"exec", "--write", "/locks/x", "--", "true"},
	} {
		t.Run(args[0], func(t *testing.T) {
			begin := time.Now()
			p := start(t, nil, append([]string{args[0], "--zk", ln.Addr().String(), "--connect-timeout", connectTimeout.String()}, args[1:]...)...)
			r := p.wait(t, time.Minute)
			took := time.Since(begin)
			require.Equal(t, exitUnavailable, r.code, r.stderr)
			requireOneLine(t, r.stderr)
			require.Contains(t, r.stderr, "timed out after 1.5s (--connect-timeout")
			require.Contains(t, r.stderr, "never answered ZooKeeper's handshake")
			require.NotContains(t, r.stderr, "authentication")
			// go-zookeeper alone would wait 200s for the handshake, and 2s
			// more to close. The bound stays under those 2s, and leaves the
			// process's start and exit on a loaded machine the rest.
			require.Less(t, took, connectTimeout+1900*time.Millisecond, "overran --connect-timeout")
		})
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"build-7:4242":       "build-7:4242",
		"héllo wörld 日本":     "héllo wörld 日本",
		"a\tb":               `a\tb`,
		"line\nbreak\r":      `line\nbreak\r`,
		"\x1b[31mred\x1b[0m": `\x1b[31mred\x1b[0m`,
		"\x1b]0;title\x07":   `\x1b]0;title\a`,
		"rtl\u202eevil":      `rtl\u202eevil`,
		"zero\u200bwidth":    `zero\u200bwidth`,
		"bad\xffutf8":        `bad\xffutf8`,
		`back\slash`:         `back\slash`,
		"\x9b31m":            `\x9b31m`, // a lone C1 CSI byte is invalid UTF-8
		"\u009b31m":          `\u009b31m`,
	} {
		require.Equal(t, want, printable(in), "%q", in)
	}
	long := strings.Repeat("x", 60_000)
	require.Equal(t, strings.Repeat("x", 39)+"…", ownerText(long))
	require.Equal(t, 40, utf8.RuneCountInString(ownerText(strings.Repeat("日", 100))))
	require.Equal(t, "(unknown)", ownerText(""))
	require.Equal(t, `a\tb`, ownerText("a\tb"))
}

// A peer's node data is shown as its owner: whoever can write the lock
// path chooses it. Tables escape it and cut it; --json has it whole.
func TestUntrustedTextInTables(t *testing.T) {
	server(t)
	prefix := zktest.LockPath(t, "/cli")
	p := prefix + "/lock"
	// Our holder in the dialect the peer sees: in any other, the peer's
	// node would end its grant (a mixed fleet fails loudly).
	hold(t, p, rwlock.Read, "ours", rwlock.WithDialect(rwlock.DialectCurator))
	conn := client(t)
	evil := "\x1b]0;pwned\x07\x1b[2J\tcol\nrow\u202e" + strings.Repeat("A", 60_000)
	const uuid = "2b4f1e6c-1a2b-4c3d-8e9f-0123456789ab"
	_, err := conn.Create(p+"/_c_"+uuid+"-__WRIT__", []byte(evil), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	shown := truncate(`\x1b]0;pwned\a\x1b[2J\tcol\nrow\u202e`+strings.Repeat("A", 60), ownerWidth)

	for _, args := range [][]string{{"queue", p}, {"ls", prefix}, {"ls", "--older-than", "0s", prefix}} {
		t.Run(strings.Join(args[:len(args)-1], " "), func(t *testing.T) {
			r := runIn(t, nil, args...)
			require.Equal(t, 0, r.code, r.stderr)
			require.NotContains(t, r.stdout, "\x1b")
			require.NotContains(t, r.stdout, "\t")
			require.NotContains(t, r.stdout, "\u202e")
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			for _, l := range lines {
				require.Less(t, len(l), 200, "a row of bounded width: %q", l)
			}
			if args[0] == "queue" {
				require.Len(t, lines, 3, r.stdout)
				require.Contains(t, lines[2], shown)
			}
		})
	}

	r := runIn(t, nil, "queue", "--json", p)
	require.Equal(t, 0, r.code, r.stderr)
	var entries []queueEntry
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &entries))
	require.Len(t, entries, 2)
	require.Equal(t, evil, entries[1].Owner, "--json keeps the whole value")
}

// A path whose ACL lets only alice in (digest:alice:secret), on the real
// server: without --auth, exit 77 and a message that says to
// authenticate; with --auth or ZKRWLOCK_AUTH, the lock as usual; ls skips
// what it may not read, with a warning.
func TestAuth(t *testing.T) {
	server(t)
	prefix := zktest.LockPath(t, "/cli")
	protected := prefix + "/protected"
	alice := client(t)
	require.NoError(t, alice.AddAuth("digest", []byte("alice:secret")))
	for _, p := range []string{"/cli", prefix} {
		_, err := alice.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
		if err != zk.ErrNodeExists {
			require.NoError(t, err)
		}
	}
	_, err := alice.Create(protected, nil, 0, zk.DigestACL(zk.PermAll, "alice", "secret"))
	require.NoError(t, err)
	t.Cleanup(func() { alice.Delete(protected, -1); alice.Delete(prefix, -1) })
	const auth = "digest:alice:secret"

	t.Run("exec without auth", func(t *testing.T) {
		r := runIn(t, nil, "exec", "--write", protected, "--", "true")
		require.Equal(t, exitNoPerm, r.code, r.stderr)
		requireOneLine(t, r.stderr)
		require.Contains(t, r.stderr, "authenticate with --auth SCHEME:CREDENTIALS (or $ZKRWLOCK_AUTH)")
		require.Contains(t, r.stderr, "does not allow this client")
		require.NotContains(t, r.stderr, "WithACL")
	})
	t.Run("exec with a wrong password", func(t *testing.T) {
		r := runIn(t, nil, "exec", "--write", "--auth", "digest:alice:wrong", protected, "--", "true")
		require.Equal(t, exitNoPerm, r.code, r.stderr)
		require.Contains(t, r.stderr, "the identity given with --auth (or $ZKRWLOCK_AUTH) is not one the ACL allows")
		require.NotContains(t, r.stderr, "wrong", "credentials are never echoed")
	})
	t.Run("exec with --auth", func(t *testing.T) {
		r := runCLI(t, nil, "exec", "--write", "--auth", auth, protected, "--", "sh", "-c", `echo "ran $ZKRWLOCK_TOKEN"`)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "ran ")
		require.Empty(t, r.stderr)
	})
	t.Run("exec with ZKRWLOCK_AUTH", func(t *testing.T) {
		r := runCLI(t, []string{"ZKRWLOCK_AUTH=" + auth}, "exec", "--read", protected, "--", "echo", "ran")
		require.Equal(t, 0, r.code, r.stderr)
		require.Equal(t, "ran\n", r.stdout)
	})
	t.Run("unknown scheme", func(t *testing.T) {
		r := runIn(t, nil, "queue", "--auth", "nosuchscheme:x", protected)
		require.Equal(t, exitNoPerm, r.code, r.stderr)
		requireOneLine(t, r.stderr)
		require.Contains(t, r.stderr, "ZooKeeper refused the nosuchscheme credentials")
	})

	// alice holds the lock in the protected directory; another lock
	// beside it is open to all.
	l := lockOf(t, alice, protected, rwlock.WithOwner("alice-job"))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	g, err := l.Lock(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { g.Release(context.Background()) })
	open := prefix + "/open"
	hold(t, open, rwlock.Read, "anyone")

	t.Run("queue", func(t *testing.T) {
		r := runIn(t, nil, "queue", protected)
		require.Equal(t, exitNoPerm, r.code, r.stderr)
		requireOneLine(t, r.stderr)
		require.Contains(t, r.stderr, "read the queue of "+protected)
		require.Contains(t, r.stderr, "--auth")

		r = runIn(t, nil, "queue", "--auth", auth, protected)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "alice-job")
	})
	t.Run("ls skips what it may not read", func(t *testing.T) {
		r := runIn(t, nil, "ls", "--json", prefix)
		require.Equal(t, 0, r.code, r.stderr)
		requireOneLine(t, r.stderr)
		require.Contains(t, r.stderr, "zkrwlock ls: warning: skipped "+protected+": its ACL does not let this client list it")
		var locks []lsEntry
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &locks))
		require.Len(t, locks, 1, r.stdout)
		require.Equal(t, open, locks[0].Path)

		r = runIn(t, []string{"ZKRWLOCK_AUTH=" + auth}, "ls", prefix)
		require.Equal(t, 0, r.code, r.stderr)
		require.Empty(t, r.stderr)
		require.Contains(t, r.stdout, protected)
		require.Contains(t, r.stdout, open)
	})
	t.Run("ls of an unreadable prefix", func(t *testing.T) {
		r := runIn(t, nil, "ls", protected)
		require.Equal(t, exitNoPerm, r.code, r.stderr)
		require.Contains(t, r.stderr, "list the locks under "+protected)
	})
}

// The shared server grants less than an hour: exec says so when asked for
// that, and refuses a --grace that fitted what it asked for but does not
// fit what it got, before it queues.
func TestSessionTimeoutGranted(t *testing.T) {
	server(t)
	p := zktest.LockPath(t, "/cli")
	r := runIn(t, nil, "exec", "--write", "--session-timeout", "1h", p, "--", "true")
	require.Equal(t, 0, r.code, r.stderr)
	requireOneLine(t, r.stderr)
	m := regexp.MustCompile(`warning: the server granted a session timeout of (\S+), not the 1h0m0s asked for .*` +
		`ridden out for about (\S+), and SIGKILL follows SIGTERM within (\S+)\n`).FindStringSubmatch(r.stderr)
	require.NotNil(t, m, r.stderr)
	granted, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	require.Less(t, granted, time.Hour)
	require.Equal(t, rideOut(granted).String(), m[2])
	require.Equal(t, stopWindow(granted).String(), m[3])
	require.Less(t, stopWindow(granted), 5*time.Second, "the --grace below must not fit")

	r = runIn(t, nil, "exec", "--write", "--session-timeout", "1h", "--grace", "5s", p, "--", "true")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "--grace 5s does not fit the session timeout the server granted, "+granted.String())

	r = runIn(t, nil, "exec", "--write", "--session-timeout", "10s", p, "--", "true")
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, r.stderr, "granted as asked: nothing to say")
}
