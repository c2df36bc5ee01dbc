package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// flagError rewords the flag package's errors in the spelling zkrwlock's
// help uses (--name, never -name), and suggests the flag meant for one
// that does not exist. The flag package's messages are its own, stable
// since Go 1: anything else passes unchanged.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		m := "unknown flag --" + name
		if s := suggestFlag(fs, name); s != "" {
			m += "; did you mean --" + s + "?"
		}
		return errors.New(m)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Errorf("--%s needs a value", name)
	}
	// invalid value "V" for flag -NAME: WHY; invalid boolean value "V" for -NAME: WHY
	if strings.HasPrefix(msg, "invalid ") {
		for _, marker := range []string{" for flag -", " for -"} {
			i := strings.LastIndex(msg, marker)
			if i < 0 {
				continue
			}
			name, why, _ := strings.Cut(msg[i+len(marker):], ": ")
			if fs.Lookup(name) != nil {
				return fmt.Errorf("%s for --%s: %s", msg[:i], name, why)
			}
		}
	}
	return err
}

// suggestFlag returns the flag of fs most like name, or "" if none is
// near: within a third of its length in edits (at least 1, at most 3), or
// one name containing the other (--wait for --no-wait).
func suggestFlag(fs *flag.FlagSet, name string) string {
	name = strings.ToLower(strings.TrimLeft(name, "-"))
	best, bestDist := "", 1<<30
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(name, f.Name)
		near := d <= min(max(len(f.Name)/3, 1), 3) ||
			len(name) >= 3 && (strings.Contains(f.Name, name) || strings.Contains(name, f.Name))
		if near && d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	return best
}

// editDistance is the number of edits (insert, delete, replace, swap two
// neighbours) between a and b, in bytes: the optimal string alignment
// distance, so that --wirte is one edit from --write.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// durationValue is a duration flag that says what it wants: flock(1)'s
// habit, --timeout 30, gets "a duration with a unit, e.g. 30s", not the
// flag package's bare "parse error".
type durationValue time.Duration

func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

func (d *durationValue) String() string { return time.Duration(*d).String() }

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err == nil {
		*d = durationValue(v)
		return nil
	}
	if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
		return fmt.Errorf("want a duration with a unit, e.g. %ss", s)
	}
	return errors.New("want a duration with a unit, e.g. 30s, 1m30s or 500ms")
}
