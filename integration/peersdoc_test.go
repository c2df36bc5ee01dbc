package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zkrwlock/rwlock/internal/zktest"
)

// The Curator classpath docs/peers.md gives a user is the one the interop
// tests compile and run their Curator contender with, and every jar of it
// is installed.
func TestPeersDocCuratorClasspath(t *testing.T) {
	zktest.RequirePeer(t, "curator")
	doc, err := os.ReadFile("../docs/peers.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^CURATOR_CLASSPATH=(\S+)$`).FindSubmatch(doc)
	require.NotNil(t, m, "docs/peers.md sets CURATOR_CLASSPATH")
	jars := strings.Split(string(m[1]), ":")
	want := make([]string, len(zktest.CuratorJars))
	for i, jar := range zktest.CuratorJars {
		want[i] = filepath.Join(zktest.JavaLibs, jar)
	}
	require.Equal(t, want, jars)
	for _, jar := range jars {
		require.FileExists(t, jar)
	}
}
