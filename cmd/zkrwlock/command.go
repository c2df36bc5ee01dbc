package main

import (
	"errors"
	"io/fs"
	"os/exec"
	"syscall"
)

// checkCommand fails, with the exit code a shell would give, for a command
// that cannot be started: 127 when it is not found, 126 when it is found
// but cannot be run. exec checks before it connects, so that a typo does
// not wait its turn for the lock and take it, only to fail then. As in a
// shell, a bare name is looked up in $PATH and a name with a slash is a
// path, relative to the working directory.
//
// What only starting the command can tell (a missing #! interpreter, a
// binary for another machine) still fails after the lock is taken, with
// the same exit codes.
func checkCommand(name string) error {
	if _, err := exec.LookPath(name); err != nil {
		return startFailure(name, err)
	}
	return nil
}

// startFailure is the failure for a command that could not be started,
// worded as a shell words it.
func startFailure(name string, err error) error {
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return fail(exitNotFound, "%s: command not found", name)
	case errors.Is(err, fs.ErrNotExist):
		return fail(exitNotFound, "%s: no such file or directory", name)
	case errors.Is(err, syscall.EISDIR):
		return fail(exitCannotRun, "cannot run %s: is a directory", name)
	case errors.Is(err, syscall.ENOTDIR):
		return fail(exitCannotRun, "cannot run %s: not a directory", name)
	case errors.Is(err, fs.ErrPermission):
		return fail(exitCannotRun, "cannot run %s: permission denied", name)
	}
	return fail(exitCannotRun, "cannot run %s: %v", name, err)
}
