package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/zkrwlock/rwlock"
)

// mixedFleetFailure returns, if err is a mixed fleet (rwlock.ErrMixedFleet),
// the failure that says so in the command line's words: exit 78, a
// configuration error that no retry fixes, with --dialect where the library
// speaks of WithDialect. It returns nil for any other error.
func mixedFleetFailure(err error, format string, args ...any) error {
	if !errors.Is(err, rwlock.ErrMixedFleet) {
		return nil
	}
	return fail(exitConfig, "%s: %s", fmt.Sprintf(format, args...), cliWords(err))
}

// cliWords is err's text from "a mixed fleet" on, where it has that, with
// the library's advice put as flags: WithDialect(DialectCurator) becomes
// --dialect curator.
func cliWords(err error) string {
	s := err.Error()
	if i := strings.Index(s, rwlock.ErrMixedFleet.Error()); i >= 0 {
		s = s[i:]
	}
	return flagWords(s)
}

// flagWords is s with WithDialect(DialectX) put as --dialect x.
func flagWords(s string) string {
	return withDialect.ReplaceAllStringFunc(s, func(m string) string {
		name := withDialect.FindStringSubmatch(m)[1]
		for _, d := range dialects {
			if constName(d) == name {
				return "--dialect " + d.String()
			}
		}
		return m
	})
}

var withDialect = regexp.MustCompile(`WithDialect\((Dialect[A-Za-z]+)\)`)

// constName is the name of d's constant: kazoo-lock's is DialectKazooLock.
func constName(d rwlock.Dialect) string {
	name := "Dialect"
	for part := range strings.SplitSeq(d.String(), "-") {
		name += strings.ToUpper(part[:1]) + part[1:]
	}
	return name
}

// lossText is a lost grant's cause for a message: a mixed fleet's in the
// command line's words.
func lossText(err error) string {
	if errors.Is(err, rwlock.ErrMixedFleet) {
		return cliWords(err)
	}
	return fmt.Sprint(err)
}
