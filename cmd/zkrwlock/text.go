package main

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Text from ZooKeeper that zkrwlock prints for a person to read — owners,
// which are any client's node data, and the paths of directories anyone
// may create — goes through printable: whoever can write a lock path must
// not reach the operator's terminal with escape sequences, nor shift a
// table's columns with a tab or a line break. --json prints the values
// as they are (JSON escapes them itself).

// printable returns s with every rune a terminal would not print as one
// visible character escaped as strconv.Quote escapes it (\t, \n, \x1b,
// \u202e), and every invalid byte as \xNN. A backslash stays as it is:
// the text is for reading, not for parsing back.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// quoted is s in double quotes, escaped as strconv.Quote does, for a
// value zkrwlock echoes in a message.
func quoted(s string) string { return strconv.Quote(s) }

// ownerWidth is the most runes of an owner a table or a progress line shows.
const ownerWidth = 40

// ownerText is an owner as a table and a progress line show it: printable,
// cut to ownerWidth runes with an ellipsis, "(unknown)" when empty.
func ownerText(owner string) string {
	if owner == "" {
		return "(unknown)"
	}
	return truncate(printable(owner), ownerWidth)
}

// truncate cuts s to at most n runes, the last of them an ellipsis.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	runes := []rune(s)
	return string(runes[:n-1]) + "…"
}
