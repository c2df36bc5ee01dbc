package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/zkrwlock/rwlock/internal/zkserver"
)

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

%FLAGS%
Exit status: 0 when stopped by a signal, 69 when no server could be started,
64 for a usage error.
`

func runDev(args []string) int {
	const prog = "zkrwlock dev"
	var servers int
	var logServer bool
	fs := newFlagSet("dev")
	fs.IntVar(&servers, "servers", 1, "number of servers: 1 (standalone) or 3 (an ensemble that survives the loss of one)")
	fs.BoolVar(&logServer, "log", false, "copy the servers' log to stderr")
	_, rest, err := parse(fs, devUsage, args, 0)
	switch {
	case errors.Is(err, errHelp):
		return 0
	case err != nil:
	case len(rest) > 0:
		err = fail(exitUsage, "unexpected argument %q", rest[0])
	case servers != 1 && servers != 3:
		err = fail(exitUsage, "--servers must be 1 or 3, not %d", servers)
	default:
		err = dev(servers, logServer)
	}
	if err != nil {
		return report(prog, err)
	}
	return 0
}

func dev(servers int, logServer bool) error {
	if err := zkserver.Available(); err != nil {
		return fail(exitUnavailable, "%v; on Debian or Ubuntu: sudo apt-get install zookeeper", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	cfg := zkserver.Config{Servers: servers}
	if logServer {
		cfg.Log = os.Stderr
	}
	plural := ""
	if servers > 1 {
		plural = "s"
	}
	fmt.Fprintf(os.Stderr, "zkrwlock dev: starting ZooKeeper (%d server%s)...\n", servers, plural)
	begin := time.Now()
	ctx, stop := interruptible(context.Background(), sigs)
	c, err := zkserver.StartCluster(ctx, cfg)
	if sig := stop(); sig != nil {
		if err == nil {
			c.Close()
		}
		return interruptedErr(sig, "while starting ZooKeeper")
	}
	if err != nil {
		return fail(exitUnavailable, "cannot start ZooKeeper: %s", oneLine(err.Error()))
	}
	cs := c.ConnectString()
	fmt.Println(cs)
	fmt.Fprintf(os.Stderr, `zkrwlock dev: ZooKeeper is serving on %s (started in %v; data in %s).
In other terminals:
  export ZOOKEEPER_SERVERS=%s
  zkrwlock exec --write /locks/demo -- sh -c 'echo migrating; sleep 10'
  zkrwlock queue /locks/demo
Press Ctrl-C to stop ZooKeeper and delete its data.
`, cs, time.Since(begin).Round(100*time.Millisecond), c.Dir(), cs)
	sig := <-sigs
	signal.Stop(sigs) // a second Ctrl-C kills us the usual way; the servers die with us
	fmt.Fprintf(os.Stderr, "zkrwlock dev: %s: stopping ZooKeeper...\n", signalName(sig))
	if err := c.Close(); err != nil {
		return fail(exitUnavailable, "stopping ZooKeeper: %s", oneLine(err.Error()))
	}
	fmt.Fprintln(os.Stderr, "zkrwlock dev: stopped")
	return nil
}
