package lockprof

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/zkrwlock/rwlock"
)

// M is what a TestMain runs: *testing.M, or anything that wraps it, such
// as what goleak.VerifyTestMain takes.
type M interface{ Run() int }

var (
	flagsOnce sync.Once
	flagFile  *string
	flagRate  *int
)

// Wrap returns m with two more flags for go test, after the flags
// -mutexprofile and -mutexprofilefraction:
//
//	-lockprofile file      write the contention profile to file when the tests are done
//	-lockprofilerate n     with -lockprofile, record about one acquisition in n (default 1: all)
//
// Call it in TestMain before anything parses the flags:
//
//	func TestMain(m *testing.M) { os.Exit(lockprof.Wrap(m).Run()) }
//
// or, with goleak, goleak.VerifyTestMain(lockprof.Wrap(m)). A relative
// file is written to go test's -outputdir when it is set, else to the
// package's directory (where go test runs the tests). Without
// -lockprofile, Run is m.Run, and the profile stays as it was set.
func Wrap(m M) M {
	flagsOnce.Do(func() {
		flagFile = flag.String("lockprofile", "", "write a zkrwlock contention profile to `file` after the tests")
		flagRate = flag.Int("lockprofilerate", 1, "with -lockprofile, record about 1 in `n` lock acquisitions")
	})
	return wrapped{m}
}

type wrapped struct{ m M }

// Run runs the tests, having turned the profile on if -lockprofile asks
// for it, and writes the profile when they are done. A profile that
// cannot be written fails the run.
func (w wrapped) Run() int {
	if !flag.Parsed() {
		flag.Parse()
	}
	file := *flagFile
	if file == "" {
		return w.m.Run()
	}
	if *flagRate < 1 {
		fmt.Fprintf(os.Stderr, "lockprof: -lockprofilerate %d: want 1 or more\n", *flagRate)
		return 2
	}
	old := rwlock.SetContentionProfileRate(*flagRate)
	code := w.m.Run()
	if dir := outputDir(); dir != "" && !filepath.IsAbs(file) {
		file = filepath.Join(dir, file)
	}
	// Written before the rate is restored, so that its Period is the rate
	// the run was sampled at, not the rate of before it (0, off).
	err := WriteFile(file)
	rwlock.SetContentionProfileRate(old)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lockprof: -lockprofile: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// outputDir is go test's -outputdir, as the test binary got it; "" if none.
func outputDir() string {
	if f := flag.Lookup("test.outputdir"); f != nil {
		return f.Value.String()
	}
	return ""
}
