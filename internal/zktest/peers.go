package zktest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/zkrwlock/rwlock/internal/zkserver"
)

// The peers, as Debian packages them (scripts/install-peers.sh).
const (
	JavaLibs = "/usr/share/java"
	Python   = "/usr/bin/python3" // not the python3 on PATH, which may lack kazoo
)

// CuratorJars are the jars in JavaLibs that a Curator client needs.
var CuratorJars = []string{
	"curator-recipes.jar", "curator-framework.jar", "curator-client.jar", "zookeeper.jar", "zookeeper-jute.jar",
	"guava.jar", "slf4j-api.jar", "slf4j-nop.jar",
}

// RequirePeer skips the test when the peer ("curator" or "kazoo") is not
// installed, or fails it where servers are required (zkserver.SkipOrFail:
// make test and CI install the peers).
func RequirePeer(t testing.TB, peer string) {
	t.Helper()
	if err := peerMissing(peer); err != nil {
		zkserver.SkipOrFail(t, fmt.Errorf("peer %s is not installed (scripts/install-peers.sh installs it): %w", peer, err))
	}
}

func peerMissing(peer string) error {
	switch peer {
	case "curator":
		for _, jar := range CuratorJars {
			if _, err := os.Stat(filepath.Join(JavaLibs, jar)); err != nil {
				return err
			}
		}
		_, err := exec.LookPath("javac")
		return err
	case "kazoo":
		if out, err := exec.Command(Python, "-c", "import kazoo").CombinedOutput(); err != nil {
			return fmt.Errorf("%s -c 'import kazoo': %v: %s", Python, err, bytes.TrimSpace(out))
		}
		return nil
	}
	return nil
}
