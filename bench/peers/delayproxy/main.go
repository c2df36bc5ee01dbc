// Command delayproxy puts network latency between ZooKeeper clients and a
// server on this machine: every chunk, in each direction, is forwarded a
// fixed delay after it arrived, in order, and pipelined requests stay
// pipelined (see internal/delayproxy). A round trip through it costs twice
// the delay more than a direct one.
//
//	delayproxy -delay 1ms [-listen 127.0.0.1:0] UPSTREAM
//
// UPSTREAM is the server's address on the loopback interface, such as
// 127.0.0.1:2181. delayproxy prints the address it listens on (one line on
// stdout, once it accepts connections) and forwards until SIGINT or SIGTERM,
// or until the process that started it exits; then it reports on stderr how
// late it wrote the chunks (the delay it really added is the delay plus
// that). scripts/compare-peers.sh runs
// one per delay and points every implementation at the same one.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/zkrwlock/rwlock/bench/peers/internal/lifeline"
	"github.com/zkrwlock/rwlock/internal/delayproxy"
)

func main() {
	delay := flag.Duration("delay", 0, "added `latency` in each direction (e.g. 0.5ms)")
	listen := flag.String("listen", "127.0.0.1:0", "listen `address`, on 127.0.0.1 (port 0: a free one)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: delayproxy -delay D [-listen 127.0.0.1:PORT] UPSTREAM")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	lifeline.Tie()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	p, err := delayproxy.Listen(*listen, flag.Arg(0), *delay)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(p.Addr())
	<-ctx.Done()
	err = p.Close()
	s := p.Stats()
	fmt.Fprintf(os.Stderr, "delayproxy %v: %d chunks (%d bytes) written late by mean %v, p50 %v, p99 %v, max %v\n",
		p.Delay(), s.Chunks, s.Bytes, s.Mean.Round(time.Microsecond), s.P50, s.P99, s.Max.Round(time.Microsecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
