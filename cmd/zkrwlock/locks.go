package main

import (
	"flag"
	"strconv"
	"strings"

	"github.com/zkrwlock/rwlock"
)

// The locks exec takes are named in one of two forms:
//
//	exec (--write | --read) [flags] PATH [--] COMMAND        (one lock, PATH anywhere)
//	exec --write A --write B --read C [flags] [--] COMMAND   (each flag followed by its PATH)
//
// The second form with one lock reads as the first. A mode flag followed
// by another flag has no PATH of its own: that is the first form, and it
// does not mix with the second.

// lockArg is one lock exec takes: its directory and mode.
type lockArg struct {
	path string
	mode rwlock.Mode
}

// modeFlag is --write or --read: a bool flag that counts how often it was
// set, so that the uses followed by a PATH can be told from the others.
type modeFlag struct {
	set  bool
	uses int
}

func (f *modeFlag) IsBoolFlag() bool { return true }

func (f *modeFlag) String() string {
	if f == nil {
		return "false"
	}
	return strconv.FormatBool(f.set)
}

func (f *modeFlag) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	f.set = v
	if v {
		f.uses++
	}
	return nil
}

// parseLocks parses exec's arguments in the second form: every --write
// and --read directly followed by an absolute PATH takes it. It returns
// the locks in the order given and the command; no locks when the
// arguments are not in that form, or are one lock with a mode flag more
// (the caller parses them in the first form, which refuses that as ever),
// and the locks with an error when a mode flag without a PATH mixes in
// with more.
func parseLocks(fs *flag.FlagSet, write, read *modeFlag, args []string) ([]lockArg, []string, error) {
	var locks []lockArg
	for {
		if err := fs.Parse(args); err != nil {
			return nil, nil, err
		}
		rest := fs.Args()
		used := args[:len(args)-len(rest)]
		args = rest
		if len(used) == 0 || len(rest) == 0 || !strings.HasPrefix(rest[0], "/") {
			break
		}
		var f *modeFlag
		var mode rwlock.Mode
		switch used[len(used)-1] {
		case "--write", "-write":
			f, mode = write, rwlock.Write
		case "--read", "-read":
			f, mode = read, rwlock.Read
		default:
			return finishLocks(locks, args, write, read)
		}
		f.uses--
		locks = append(locks, lockArg{rest[0], mode})
		args = rest[1:]
	}
	return finishLocks(locks, args, write, read)
}

func finishLocks(locks []lockArg, rest []string, write, read *modeFlag) ([]lockArg, []string, error) {
	bare := write.uses > 0 || read.uses > 0
	switch {
	case len(locks) == 0, len(locks) == 1 && bare: // the first form's, "exactly one of" and all
		return nil, nil, nil
	case bare:
		return locks, nil, fail(exitUsage, "a --write or --read without a PATH right after it: "+
			"give each lock as --write PATH or --read PATH, or one lock as (--write | --read) ... PATH, not both forms")
	}
	return locks, rest, nil
}

// checkLocks refuses a path named twice: one process cannot hold two
// grants of one lock from one set.
func checkLocks(locks []lockArg) error {
	seen := map[string]rwlock.Mode{}
	for _, l := range locks {
		if m, ok := seen[l.path]; ok {
			return fail(exitUsage, "%s is named twice (--%s and --%s): name each lock once", l.path, m, l.mode)
		}
		seen[l.path] = l.mode
		if err := checkPath(l.path); err != nil {
			return err
		}
	}
	return nil
}

// describeLocks names the locks of a set, as given: "write /a, read /b".
func describeLocks(locks []lockArg) string {
	s := make([]string, len(locks))
	for i, l := range locks {
		s[i] = l.mode.String() + " " + l.path
	}
	return strings.Join(s, ", ")
}
