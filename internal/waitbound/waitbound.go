// Package waitbound widens a test binary whose tests spend their time
// waiting rather than computing: for leases to run out, for agents and
// workers started as processes, for a reaper's next pass. The testing
// package runs GOMAXPROCS parallel tests at once by default, which on a
// two-core machine leaves such a binary idle for most of its run (the
// command's end-to-end tests used a quarter of one core over 80 seconds).
// Each test still waits for what it waits for; only more of them wait at
// the same time.
package waitbound

import (
	"flag"
	"strconv"
)

// Parallel is how many parallel tests a wait-bound binary runs at once
// when the command line does not say (-parallel / -test.parallel).
const Parallel = 8

// Widen sets -test.parallel to Parallel unless the command line set it.
// A TestMain calls it before m.Run; it parses the command line, which
// m.Run then leaves as it is.
func Widen() {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		// The flag is registered by the testing package before TestMain
		// runs; a failure here would be a test binary without it.
		if err := flag.Set("test.parallel", strconv.Itoa(Parallel)); err != nil {
			panic(err)
		}
	}
}
