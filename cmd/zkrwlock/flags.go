package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// newFlagSet returns a flag set that reports nothing itself: parse
// returns its errors and --help is answered with usage on stdout.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// errHelp means --help was asked for and answered.
var errHelp = errors.New("help shown")

// parse parses flags and up to npos positional arguments, allowing flags
// between them (zkrwlock queue PATH --json). It stops at the first
// argument after the positionals, or after "--", and returns the
// positionals and the rest (without the "--"). --help prints usage on out.
func parse(out io.Writer, fs *flag.FlagSet, usage string, args []string, npos int) (pos, rest []string, err error) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printUsage(out, fs, usage)
				return nil, nil, errHelp
			}
			return nil, nil, &failure{exitUsage, flagError(fs, err)}
		}
		args = fs.Args()
		if len(pos) == npos || len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
		if len(pos) == npos && (len(args) == 0 || args[0] == "--" || !strings.HasPrefix(args[0], "-")) {
			break
		}
	}
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	return pos, args, nil
}

// given returns the names of the flags set on the command line.
func given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// printUsage writes the command's usage text and its flags, GNU style,
// with each flag's help wrapped to fit 80 columns.
func printUsage(w io.Writer, fs *flag.FlagSet, usage string) {
	const indent = 26
	head, tail, _ := strings.Cut(usage, "\n\n%FLAGS%\n")
	fmt.Fprintln(w, head)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintln(w, "\nFlags:")
	}
	fs.VisitAll(func(f *flag.Flag) {
		typ, help := flag.UnquoteUsage(f)
		if _, ok := f.Value.(*durationValue); ok && typ == "value" {
			typ = "duration"
		}
		name := "  --" + f.Name
		if typ != "" {
			name += " " + typ
		}
		// A help text that tells its default itself is not told it twice.
		if d := f.DefValue; d != "" && d != "false" && d != "0" && d != "0s" && !strings.Contains(help, "(default") {
			help += fmt.Sprintf(" (default %s)", d)
		}
		line := name
		if len(name) < indent-1 {
			line += strings.Repeat(" ", indent-len(name))
		} else {
			line += "\n" + strings.Repeat(" ", indent)
		}
		col := indent
		for i, word := range strings.Fields(help) {
			if i > 0 && col+1+len(word) > 80 {
				line += "\n" + strings.Repeat(" ", indent)
				col = indent
			} else if i > 0 {
				line += " "
				col++
			}
			line += word
			col += len(word)
		}
		fmt.Fprintln(w, line)
	})
	if tail != "" {
		fmt.Fprintln(w)
		fmt.Fprint(w, tail)
	}
}

// connFlags are the flags of every command that talks to ZooKeeper.
type connFlags struct {
	zk             string
	zkGiven        bool // --zk was given, if only as --zk ''
	connectTimeout time.Duration
	sessionTimeout time.Duration
	auth           []string // --auth values, SCHEME:CREDENTIALS; else $ZKRWLOCK_AUTH
	debug          bool

	granted time.Duration // the session timeout the server granted; set by dial
}

const defaultServers = "127.0.0.1:2181"

// defaultSessionTimeout is 30s, not go-zookeeper's usual 10s. A job under
// exec then rides out a silent connection of about 20s before its lock is
// lost (see docs/guarantees.md). It gets a sixteenth of 30s, less 0.1s
// (1.775s), between SIGTERM and SIGKILL then. A holder that dies blocks the
// others for 30s. It is within ZooKeeper's default maxSessionTimeout, 20
// ticks or 40s.
const defaultSessionTimeout = 30 * time.Second

// authEnv holds the credentials when --auth is not given: unlike a flag,
// it does not show in ps.
const authEnv = "ZKRWLOCK_AUTH"

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.Func("zk", "ZooKeeper servers as `host:port,...` (default $ZOOKEEPER_SERVERS, else "+defaultServers+")",
		func(v string) error { c.zk, c.zkGiven = v, true; return nil })
	fs.Func("auth", "authenticate the session as `SCHEME:CREDENTIALS`, e.g. digest:alice:secret, for paths whose ACL "+
		"asks for it; may be repeated (default $"+authEnv+", which other users cannot read in ps as they can a flag)",
		func(v string) error { c.auth = append(c.auth, v); return nil }) // checked by validate, which never echoes it
	durationVar(fs, &c.connectTimeout, "connect-timeout", 5*time.Second,
		"give up (exit 69) when there is no ZooKeeper session after this long; a connection refused at every "+
			"address gives up sooner, once refused twice a second apart")
	durationVar(fs, &c.sessionTimeout, "session-timeout", defaultSessionTimeout,
		"ZooKeeper session timeout T to ask for (the server grants one within its minSessionTimeout and "+
			"maxSessionTimeout; exec says when it differs): how long a dead holder blocks others; it also sets "+
			"how long a silent connection is ridden out (see docs/guarantees.md)")
	fs.BoolVar(&c.debug, "debug", false, "log every protocol step and the ZooKeeper client's messages on stderr")
}

// servers returns the server list: --zk, else $ZOOKEEPER_SERVERS, else the
// default. Each is host[:port] (go-zookeeper adds :2181).
func (c *connFlags) servers() ([]string, error) {
	s, from := c.zk, "--zk"
	if c.zkGiven && strings.TrimSpace(s) == "" {
		// An empty variable in a script, say: never the default server.
		return nil, fail(exitUsage, "--zk: no ZooKeeper servers given (leave --zk out for $ZOOKEEPER_SERVERS, else %s)", defaultServers)
	}
	if s == "" {
		s, from = os.Getenv("ZOOKEEPER_SERVERS"), "ZOOKEEPER_SERVERS"
	}
	if s == "" {
		s = defaultServers
	}
	var servers []string
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if err := checkServer(part); err != nil {
			return nil, fail(exitUsage, "%s: server %s: %v", from, quoted(part), err)
		}
		servers = append(servers, part)
	}
	if len(servers) == 0 {
		return nil, fail(exitUsage, "%s: no ZooKeeper servers in %s", from, quoted(s))
	}
	return servers, nil
}

// checkServer checks one server address: host or host:port, with a port
// from 1 to 65535. A URL (http://host:port, zk://...) is not an address,
// and a path after one is a chroot, which zkrwlock does not support.
func checkServer(addr string) error {
	if scheme, _, ok := strings.Cut(addr, "://"); ok {
		return fmt.Errorf("not a host:port address but a URL (%s://); give host:port, e.g. 127.0.0.1:2181", printable(scheme))
	}
	if _, chroot, ok := strings.Cut(addr, "/"); ok {
		return fmt.Errorf("a chroot suffix (/%s) is not supported; give the full lock path instead", printable(chroot))
	}
	host, port, err := net.SplitHostPort(addr)
	switch {
	case err != nil && strings.Contains(err.Error(), "missing port"):
		host, port = addr, ""
	case err != nil:
		return fmt.Errorf("not a host:port address (%v)", err)
	}
	if host == "" || strings.ContainsAny(host, " \t[]") {
		return errors.New("not a host:port address: no host")
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("not a host:port address: port %s is not a number from 1 to 65535", quoted(port))
		}
	}
	return nil
}

// credentials returns the --auth values, else $ZKRWLOCK_AUTH's, each split
// into scheme and credentials. Its errors never show the credentials.
func (c *connFlags) credentials() ([][2]string, error) {
	values, from := c.auth, "--auth"
	if len(values) == 0 {
		if v := os.Getenv(authEnv); v != "" {
			values, from = []string{v}, authEnv
		}
	}
	var creds [][2]string
	for _, v := range values {
		scheme, cred, ok := strings.Cut(v, ":")
		if !ok || scheme == "" || cred == "" || strings.ContainsAny(scheme, " \t") {
			return nil, fail(exitUsage, "%s: want SCHEME:CREDENTIALS, e.g. digest:alice:secret (the value given is not shown)", from)
		}
		creds = append(creds, [2]string{scheme, cred})
	}
	return creds, nil
}

func (c *connFlags) validate() error {
	switch {
	case c.connectTimeout <= 0:
		return fail(exitUsage, "--connect-timeout must be positive, not %v", c.connectTimeout)
	case c.sessionTimeout <= 0:
		return fail(exitUsage, "--session-timeout must be positive, not %v", c.sessionTimeout)
	}
	if _, err := c.servers(); err != nil {
		return err
	}
	_, err := c.credentials()
	return err
}

// sessionTimeoutNow is the session timeout in force: the one the server
// granted once dial has connected, else the one asked for.
func (c *connFlags) sessionTimeoutNow() time.Duration {
	if c.granted > 0 {
		return c.granted
	}
	return c.sessionTimeout
}
