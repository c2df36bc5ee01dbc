// Command zkserve runs one standalone ZooKeeper server (or, with -servers 3,
// an ensemble of three, for W9) on 127.0.0.1 for
// the comparison with the peers, configured as the peers' workloads expect
// and as bench/ configures its own throwaway server: tickTime 2 s,
// maxSessionTimeout 60 s, no limit on connections per client address (W6
// opens 201 sessions from 127.0.0.1), data on tmpfs, a JVM heap of
// -Xms256m -Xmx1g. It uses internal/zkserver, so it runs the same Debian
// zookeeper package (scripts/install-zookeeper.sh).
//
//	zkserve [-servers N] [-log FILE] [-dir DIR]
//
// Once the servers serve, zkserve prints their connect string (one line on
// stdout: host:port[,host:port...]); it stops the server on SIGINT or SIGTERM, or when the process
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
	servers := flag.Int("servers", 1, "`members` of the ensemble (1: a standalone server)")
	flag.Parse()
	if flag.NArg() != 0 || *servers < 1 {
		flag.Usage()
		os.Exit(2)
	}
	lifeline.Tie()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *servers, *logPath, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "zkserve:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, servers int, logPath, dir string) error {
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
		Servers:           servers,
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
