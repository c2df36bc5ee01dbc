// Command zkrwlock takes distributed read/write locks on Apache ZooKeeper
// from the shell, the way flock(1) takes file locks on one host.
//
//	zkrwlock exec --write /locks/schema -- ./migrate.sh   run a command under the lock
//	zkrwlock queue /locks/schema                          who holds the lock, who waits
//	zkrwlock leader --watch /elections/api                who leads an election, as it changes
//	zkrwlock ls --older-than 1h /locks                    every lock under /locks, stuck first
//	zkrwlock dev                                          a throwaway local ZooKeeper
//	zkrwlock version                                      the version of this build
//
// Install it with
//
//	go install github.com/zkrwlock/rwlock/cmd/zkrwlock@latest
//
// Every command takes --help, which also lists the exit codes; the
// command's README (cmd/zkrwlock/README.md in the repository) is the
// manual. It is written and tested on Linux. It also builds for macOS,
// where the command exec runs gets no signal when zkrwlock itself is
// killed, and where dev is missing.
package main

import (
	"fmt"
	"os"
)

const mainUsage = `Usage: zkrwlock COMMAND [flags] [arguments]

Distributed read/write locks on Apache ZooKeeper, for shell scripts and cron.

Commands:
  exec     take the lock, run a command while holding it, release it when it exits
  queue    show who holds the lock and who waits, in order
  revoke   ask whoever holds the lock now to let go
  leader   print the leader of an election, or follow it (--watch)
  ls       list the locks under a prefix, stuck ones first
  dev      start a throwaway local ZooKeeper server until Ctrl-C or SIGTERM
  version  print zkrwlock's version (also --version)
  help     show the usage of a command

Run 'zkrwlock COMMAND --help' for a command's flags.

ZooKeeper servers: --zk host:port,...; default $ZOOKEEPER_SERVERS, else 127.0.0.1:2181.

` + exitCodes

// stdio is where a command reads and writes: the process's own streams when
// run from main, files of a test's when a test calls run. The command that
// exec runs inherits them, so they are files, not writers.
type stdio struct{ in, out, err *os.File }

type command struct {
	run   func(std stdio, args []string) int
	usage string
}

var commands = map[string]command{
	"exec":    {runExec, execUsage},
	"queue":   {runQueue, queueUsage},
	"revoke":  {runRevoke, revokeUsage},
	"leader":  {runLeader, leaderUsage},
	"ls":      {runLs, lsUsage},
	"dev":     {runDev, devUsage},
	"version": {runVersion, versionUsage},
}

func main() {
	os.Exit(run(stdio{os.Stdin, os.Stdout, os.Stderr}, os.Args[1:]))
}

// run runs the command line args (without the program name) and returns
// the exit code.
func run(std stdio, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(std.err, mainUsage)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		fmt.Fprint(std.out, mainUsage)
		return 0
	case "--version":
		writeVersion(std.out)
		return 0
	case "help":
		if len(args) == 1 {
			fmt.Fprint(std.out, mainUsage)
			return 0
		}
		if c, ok := commands[args[1]]; ok {
			return c.run(std, []string{"--help"})
		}
		name = args[1]
	default:
		if c, ok := commands[name]; ok {
			return c.run(std, args[1:])
		}
	}
	return usageError(std.err, "zkrwlock", fmt.Errorf("unknown command %q", name))
}
