package main

import "errors"

const devUsage = `Usage: zkrwlock dev [flags]

Starts a throwaway ZooKeeper server on 127.0.0.1 (a free port, data in a
temporary directory, on tmpfs where there is one), prints its connect string
on stdout, and serves until Ctrl-C (SIGINT) or SIGTERM; then it stops the
server and removes its data. For trying zkrwlock out, and for tests: not for
production.

It runs Debian's zookeeper package (sudo apt-get install zookeeper), or the
jars named by $ZOOKEEPER_CLASSPATH, on the installed Java.

  terminal 1:  zkrwlock dev
  terminal 2:  export ZOOKEEPER_SERVERS=127.0.0.1:PORT   (as printed)
               zkrwlock exec --write /locks/demo -- sh -c 'echo migrating; sleep 10'

In a script, run it in the background and stop it with SIGTERM: a
background job of a non-interactive shell ignores SIGINT, so Ctrl-C's
signal (kill -INT) does not reach it there.

  zkrwlock dev >addr &
  dev=$!
  until [ -s addr ]; do sleep 0.1; done
  export ZOOKEEPER_SERVERS=$(cat addr)
  ...
  kill -TERM "$dev"; wait "$dev"

%FLAGS%
Exit status: 0 when stopped by a signal, 69 when no server could be started,
64 for a usage error.
`

func runDev(std stdio, args []string) int {
	const prog = "zkrwlock dev"
	var servers int
	var logServer bool
	fs := newFlagSet("dev")
	fs.IntVar(&servers, "servers", 1, "number of servers: 1 (standalone) or 3 (an ensemble that survives the loss of one)")
	fs.BoolVar(&logServer, "log", false, "copy the servers' log to stderr")
	_, rest, err := parse(std.out, fs, devUsage, args, 0)
	switch {
	case errors.Is(err, errHelp):
		return 0
	case err != nil:
	case len(rest) > 0:
		err = fail(exitUsage, "unexpected argument %q", rest[0])
	case servers != 1 && servers != 3:
		err = fail(exitUsage, "--servers must be 1 or 3, not %d", servers)
	default:
		err = dev(std, servers, logServer)
	}
	if err != nil {
		return report(std.err, prog, err)
	}
	return 0
}
