package rwlock

import (
	"fmt"
	"strings"
)

// errorf is fmt.Errorf for the package's own messages, which start with
// "rwlock: ": the errors it wraps keep their words but not their own
// "rwlock: " prefixes, so that a message says it once ("rwlock: trylock
// /x: would block", not "rwlock: trylock /x: rwlock: would block").
// errors.Is and errors.As see through it as through fmt.Errorf.
func errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "rwlock: "); ok && strings.Contains(rest, "rwlock: ") {
		msg = "rwlock: " + strings.ReplaceAll(rest, "rwlock: ", "")
	}
	return &prefixed{msg, err}
}

type prefixed struct {
	msg string
	err error
}

func (e *prefixed) Error() string { return e.msg }
func (e *prefixed) Unwrap() error { return e.err }
