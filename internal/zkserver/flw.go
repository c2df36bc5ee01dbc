package zkserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

const (
	// flwTimeout bounds one four-letter-word exchange: a server that is
	// starting may accept a connection and never answer it.
	flwTimeout   = 2 * time.Second
	pollInterval = 50 * time.Millisecond
	// leaderTimeout bounds Leader's wait for an election to end.
	leaderTimeout = 30 * time.Second
)

// FourLetter sends a four-letter-word command (ruok, srvr, mntr, wchp, wchc,
// cons, ...) to member i and returns the reply. It fails when ctx ends or
// after 2s without a complete reply.
func (c *Cluster) FourLetter(ctx context.Context, i int, cmd string) (string, error) {
	m, err := c.member(i)
	if err != nil {
		return "", err
	}
	return fourLetter(ctx, m.addr(), cmd)
}

func fourLetter(ctx context.Context, addr, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, flwTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("zkserver: %s to %s: %w", cmd, addr, err)
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) }) // ctx cancelled early
	defer stop()

	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", fmt.Errorf("zkserver: %s to %s: %w", cmd, addr, err)
	}
	reply, err := io.ReadAll(conn) // the server closes the connection after replying
	if err != nil {
		return "", fmt.Errorf("zkserver: %s to %s: %w", cmd, addr, err)
	}
	return string(reply), nil
}

// mode returns the "Mode:" of srvr's reply (standalone, leader, follower,
// observer), or "" while the server does not serve requests.
func mode(ctx context.Context, addr string) string {
	reply, err := fourLetter(ctx, addr, "srvr")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(reply) {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m)
		}
	}
	return ""
}

// serving reports whether the server answers ruok with imok and reports a
// Mode: ruok alone also answers while an ensemble member has no quorum.
func serving(ctx context.Context, addr string) bool {
	reply, err := fourLetter(ctx, addr, "ruok")
	return err == nil && reply == "imok" && mode(ctx, addr) != ""
}

// Mntr returns member i's `mntr` statistics, keyed by name (zk_version,
// zk_packets_received, zk_server_state, ...).
func (c *Cluster) Mntr(ctx context.Context, i int) (map[string]string, error) {
	reply, err := c.FourLetter(ctx, i, "mntr")
	if err != nil {
		return nil, err
	}
	stats := make(map[string]string)
	for line := range strings.Lines(reply) {
		if k, v, ok := strings.Cut(strings.TrimRight(line, "\n"), "\t"); ok {
			stats[k] = v
		}
	}
	if len(stats) == 0 {
		return nil, fmt.Errorf("zkserver: mntr of member %d: unexpected reply %q", i, reply)
	}
	return stats, nil
}

// SumMntr returns the sum of the integer mntr statistic key over the running
// members, e.g. zk_packets_received for the requests the whole ensemble
// served. It fails if a running member does not answer or lacks key.
func (c *Cluster) SumMntr(ctx context.Context, key string) (int64, error) {
	var sum int64
	for _, m := range c.running() {
		stats, err := c.Mntr(ctx, m.index)
		if err != nil {
			return 0, err
		}
		v, ok := stats[key]
		if !ok {
			return 0, fmt.Errorf("zkserver: member %d has no mntr key %q", m.index, key)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("zkserver: member %d: mntr %s: %w", m.index, key, err)
		}
		sum += n
	}
	return sum, nil
}

// Leader returns the index of the member that leads the ensemble (0 for a
// standalone server). While an election runs no member leads, so it polls
// for up to 30s before giving up; it fails at once if no member is running.
func (c *Cluster) Leader() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), leaderTimeout)
	defer cancel()
	leader := -1
	err := poll(ctx, func() (bool, error) {
		running := c.running()
		if len(running) == 0 {
			return false, errors.New("none is running")
		}
		for _, m := range running {
			if md := mode(ctx, m.addr()); md == "leader" || md == "standalone" {
				leader = m.index
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return -1, fmt.Errorf("zkserver: no leader among the running members: %w", err)
	}
	return leader, nil
}

// poll calls check every pollInterval until it reports done or fails, or ctx
// ends (then it returns ctx's error).
func poll(ctx context.Context, check func() (done bool, err error)) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		done, err := check()
		if done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
