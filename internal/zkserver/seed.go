package zkserver

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Node is a persistent node that a cluster starts with (see Config.Seed).
type Node struct {
	// Path is the node's absolute path; missing parents are created too.
	Path string
	// Cversion is where the node's count of child creations starts: the
	// number the server gives the node's next sequential child. (The
	// cversion a Stat reports counts deletions too: the server reports
	// twice its count less the children, in int32 arithmetic.) Zero leaves
	// it at zero; it cannot be negative.
	Cversion int32
}

//go:embed SeedSnapshot.java
var seedSource []byte

// seed writes a snapshot holding cfg.Seed into every member's data dir. It
// runs SeedSnapshot.java on the server's own jars, so the snapshot is one
// the server reads as its own.
func (c *Cluster) seed(ctx context.Context) error {
	if len(c.cfg.Seed) == 0 {
		return nil
	}
	var nodes strings.Builder
	for _, n := range c.cfg.Seed {
		if !strings.HasPrefix(n.Path, "/") || strings.HasSuffix(n.Path, "/") || n.Cversion < 0 ||
			strings.ContainsAny(n.Path, "\n\r") {
			return fmt.Errorf("zkserver: invalid seed node %+v", n)
		}
		fmt.Fprintf(&nodes, "%d %s\n", n.Cversion, n.Path)
	}
	src := filepath.Join(c.dir, "SeedSnapshot.java")
	if err := os.WriteFile(src, seedSource, 0o644); err != nil {
		return fmt.Errorf("zkserver: %w", err)
	}
	args := []string{"-Xmx128m", "-cp", c.classpath, "-Dzookeeper.root.logger=WARN,CONSOLE", src}
	for _, m := range c.members {
		args = append(args, m.dataDir())
	}
	cmd := exec.CommandContext(ctx, c.java, args...)
	cmd.Stdin = strings.NewReader(nodes.String())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("zkserver: seeding the data dirs: %w\n%s", err, out.String())
	}
	return nil
}
