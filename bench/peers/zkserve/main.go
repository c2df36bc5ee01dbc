// Command zkserve runs one standalone ZooKeeper server on 127.0.0.1 for
// the comparison with the peers, configured as the peers' workloads expect
// and as bench/ configures its own throwaway server: tickTime 2 s,
// maxSessionTimeout 60 s, no limit on connections per client address (W6
// opens 201 sessions from 127.0.0.1), data on tmpfs, a JVM heap of
// -Xms256m -Xmx1g. It uses internal/zkserver, so it runs the same Debian
// zookeeper package (scripts/install-zookeeper.sh).
//
//	zkserve [-log FILE] [-dir DIR]
//
// Once the server serves, zkserve prints its client address (one line on
// stdout); it stops the server on SIGINT or SIGTERM, or when the process
// that started it exits.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/zkrwlock/rwlock/bench/peers/internal/lifeline"
	"github.com/zkrwlock/rwlock/internal/zkserver"
)

const startTimeout = 2 * time.Minute // a loaded machine

func main() {
	logPath := flag.String("log", "", "also write the server's log to this `file`")
	dir := flag.String("dir", "", "keep the server's data and log in this `directory` "+
		"(default: a new one on /dev/shm, removed at exit)")
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	lifeline.Tie()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *logPath, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "zkserve:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, logPath, dir string) error {
	var log io.Writer
	if logPath != "" {
		f, err := os.Create(logPath)
		if err != nil {
			return err
		}
		defer f.Close()
		log = f
	}
	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	c, err := zkserver.StartCluster(startCtx, zkserver.Config{
		TickTime:          2 * time.Second,
		MaxSessionTimeout: 60 * time.Second,
		JavaOpts:          []string{"-Xms256m", "-Xmx1g"},
		Dir:               dir,
		Log:               log,
	})
	if err != nil {
		return err
	}
	fmt.Println(c.ConnectString())
	<-ctx.Done()
	return c.Close()
}
