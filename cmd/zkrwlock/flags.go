package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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
			return nil, nil, &failure{exitUsage, err}
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
		name := "  --" + f.Name
		if typ != "" {
			name += " " + typ
		}
		if d := f.DefValue; d != "" && d != "false" && d != "0" && d != "0s" {
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
	connectTimeout time.Duration
	sessionTimeout time.Duration
	debug          bool
}

const defaultServers = "127.0.0.1:2181"

// defaultSessionTimeout is 30s, not go-zookeeper's usual 10s: a job under
// exec rides out a silent connection of about 0.69 of it (20s) before its
// lock is lost, and gets a sixteenth of it (1.9s) between SIGTERM and
// SIGKILL then; a holder that dies blocks the others for that long. It is
// within ZooKeeper's default maxSessionTimeout (20 ticks, 40s).
const defaultSessionTimeout = 30 * time.Second

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.zk, "zk", "", "ZooKeeper servers as `host:port,...` (default $ZOOKEEPER_SERVERS, else "+defaultServers+")")
	fs.DurationVar(&c.connectTimeout, "connect-timeout", 5*time.Second,
		"give up (exit 69) when there is no ZooKeeper session after this long")
	fs.DurationVar(&c.sessionTimeout, "session-timeout", defaultSessionTimeout,
		"ZooKeeper session timeout: how long a dead holder blocks others, and about how long a silent connection is ridden out")
	fs.BoolVar(&c.debug, "debug", false, "log every protocol step and the ZooKeeper client's messages on stderr")
}

// servers returns the server list: --zk, else $ZOOKEEPER_SERVERS, else the
// default.
func (c *connFlags) servers() ([]string, error) {
	s := c.zk
	if s == "" {
		s = os.Getenv("ZOOKEEPER_SERVERS")
	}
	if s == "" {
		s = defaultServers
	}
	var servers []string
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		switch {
		case part == "":
			continue
		case strings.Contains(part, "/"):
			return nil, fail(exitUsage, "server %q: a chroot suffix (/path) is not supported; give the full lock path instead", part)
		}
		servers = append(servers, part)
	}
	if len(servers) == 0 {
		return nil, fail(exitUsage, "no ZooKeeper servers in %q", s)
	}
	return servers, nil
}

func (c *connFlags) validate() error {
	switch {
	case c.connectTimeout <= 0:
		return fail(exitUsage, "--connect-timeout must be positive, not %v", c.connectTimeout)
	case c.sessionTimeout <= 0:
		return fail(exitUsage, "--session-timeout must be positive, not %v", c.sessionTimeout)
	}
	return nil
}
