package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/zkrwlock/rwlock"
)

// revocationEnv names, in the command's environment, the file that exec
// writes when a revocation stops the command.
const revocationEnv = "ZKRWLOCK_REVOCATION_FILE"

// describeRevocation says who revoked g, when and why, for a message:
// " by ops-1:311 at 2026-11-28T10:00:00Z: DB maintenance". It is empty if
// g was not revoked.
func describeRevocation(g *rwlock.Grant) string {
	rev, ok := g.Revocation()
	if !ok {
		return ""
	}
	var b strings.Builder
	if rev.By != "" {
		b.WriteString(" by " + printable(rev.By))
	}
	if !rev.At.IsZero() {
		b.WriteString(" at " + rev.At.UTC().Format(time.RFC3339))
	}
	if rev.Reason != "" {
		b.WriteString(": " + printable(rev.Reason))
	} else {
		b.WriteString(" (no reason given)")
	}
	return b.String()
}

// A revocationFile is the file named by ZKRWLOCK_REVOCATION_FILE. It does
// not exist until a revocation stops the command. exec writes it before it
// signals, so the command's SIGTERM handler can read why. It lives in a
// directory of exec's own, mode 0700, removed when the command has exited.
type revocationFile struct {
	dir, path string
}

// newRevocationFile makes the directory and names the file in it.
func newRevocationFile() (*revocationFile, error) {
	dir, err := os.MkdirTemp("", "zkrwlock-")
	if err != nil {
		return nil, err
	}
	return &revocationFile{dir: dir, path: filepath.Join(dir, "revocation")}, nil
}

// env is the command's environment variable.
func (f *revocationFile) env() string { return revocationEnv + "=" + f.path }

// write writes the revocation of g, held on lock, as key=value lines. It
// writes a temporary file and renames it, so the command never reads half
// of it.
func (f *revocationFile) write(g *rwlock.Grant, lock lockArg) error {
	rev, _ := g.Revocation()
	at := ""
	if !rev.At.IsZero() {
		at = rev.At.UTC().Format(time.RFC3339Nano)
	}
	data := fmt.Sprintf("reason=%s\nby=%s\nat=%s\nlock=%s\nmode=%s\nnode=%s\n",
		oneLine(rev.Reason), oneLine(rev.By), at, lock.path, lock.mode, g.Node())
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, f.path)
}

// remove removes the file and its directory.
func (f *revocationFile) remove() { os.RemoveAll(f.dir) }
