package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/zkrwlock/rwlock/internal/zkserver"
)

// dev serves a throwaway ZooKeeper until a signal, as devUsage says.
func dev(std stdio, servers int, logServer bool) error {
	if err := zkserver.Available(); err != nil {
		return fail(exitUnavailable, "%v; on Debian or Ubuntu: sudo apt-get install zookeeper", err)
	}
	sigs := make(chan os.Signal, 1)
	notify(sigs, interrupts...)
	defer signal.Stop(sigs)
	cfg := zkserver.Config{Servers: servers}
	if logServer {
		cfg.Log = std.err
	}
	plural := ""
	if servers > 1 {
		plural = "s"
	}
	fmt.Fprintf(std.err, "zkrwlock dev: starting ZooKeeper (%d server%s)...\n", servers, plural)
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
	fmt.Fprintln(std.out, cs)
	fmt.Fprintf(std.err, `zkrwlock dev: ZooKeeper is serving on %s (started in %v; data in %s).
In other terminals:
  export ZOOKEEPER_SERVERS=%s
  zkrwlock exec --write /locks/demo -- sh -c 'echo migrating; sleep 10'
  zkrwlock queue /locks/demo
Press Ctrl-C to stop ZooKeeper and delete its data.
`, cs, time.Since(begin).Round(100*time.Millisecond), c.Dir(), cs)
	sig := <-sigs
	signal.Stop(sigs) // a second Ctrl-C kills us the usual way; the servers die with us
	fmt.Fprintf(std.err, "zkrwlock dev: %s: stopping ZooKeeper...\n", signalName(sig))
	if err := c.Close(); err != nil {
		return fail(exitUnavailable, "stopping ZooKeeper: %s", oneLine(err.Error()))
	}
	fmt.Fprintln(std.err, "zkrwlock dev: stopped")
	return nil
}
