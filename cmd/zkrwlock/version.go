package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

const versionUsage = `Usage: zkrwlock version

Prints the version of zkrwlock (the module version it was built from, or
(devel) for a build from a checkout), the revision when the build recorded
it, and the Go release that built it.

go build and go install record the revision of a clone, unless -buildvcs=false
(in GOFLAGS too) or the checkout is a git worktree; go run never does.
make install records it in every case.
`

// revision and modified are set by make install (go install -ldflags
// "-X main.revision=..."), for a build that records no VCS information.
var revision, modified string

func runVersion(std stdio, args []string) int {
	const prog = "zkrwlock version"
	fs := newFlagSet("version")
	_, rest, err := parse(std.out, fs, versionUsage, args, 0)
	switch {
	case errors.Is(err, errHelp):
		return 0
	case err != nil:
	case len(rest) > 0:
		err = fail(exitUsage, "unexpected argument %q", rest[0])
	}
	if err != nil {
		return report(std.err, prog, err)
	}
	writeVersion(std.out)
	return 0
}

// writeVersion prints "zkrwlock VERSION" and what the build recorded:
//
//	zkrwlock v0.1.0 (go1.25.0)
//	zkrwlock (devel) (revision 564d697a1b2c, modified; go1.26.8)
func writeVersion(w io.Writer) {
	version, extra := "(unknown)", []string(nil)
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		rev, dirty := revision, modified
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value
			}
		}
		if rev != "" {
			r := "revision " + rev[:min(len(rev), 12)]
			if dirty == "true" {
				r += ", modified"
			}
			extra = append(extra, r)
		}
	}
	extra = append(extra, runtime.Version())
	fmt.Fprintf(w, "zkrwlock %s (%s)\n", version, strings.Join(extra, "; "))
}
