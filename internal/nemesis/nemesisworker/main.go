// Command nemesisworker is the CMD the nemesis test runs under
// `leasekeeper claim`: it records, in an append-only history file, when it
// worked on which card under which claim, and exits with the status it is
// told to.
//
// Usage: nemesisworker HISTORY UNITS UNIT_MS EXIT
//
// Every line is "KIND CARD EPOCH MARKER PID MONO_NS" with KIND one of
// start, write, end, and MONO_NS the host's CLOCK_MONOTONIC. Every process
// of the test runs on one host, so one monotonic clock orders all of them.
// Each line is a single write(2) to a file opened O_APPEND, so lines of
// concurrent writers never interleave and a kill -9 loses at most the line
// not yet written.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: nemesisworker HISTORY UNITS UNIT_MS EXIT")
		os.Exit(2)
	}
	units, err1 := strconv.Atoi(os.Args[2])
	unitMS, err2 := strconv.Atoi(os.Args[3])
	exit, err3 := strconv.Atoi(os.Args[4])
	if err1 != nil || err2 != nil || err3 != nil {
		fmt.Fprintln(os.Stderr, "nemesisworker: bad arguments")
		os.Exit(2)
	}
	f, err := os.OpenFile(os.Args[1], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	card, epoch, marker := os.Getenv("LEASEKEEPER_CARD"), os.Getenv("LEASEKEEPER_EPOCH"), os.Getenv("LEASEKEEPER_MARKER")
	record := func(kind string) {
		// The clock is read right before the write: a line says the
		// worker was still at work at that instant.
		line := fmt.Sprintf("%s %s %s %s %d %d\n", kind, card, epoch, marker, os.Getpid(), mono())
		if _, err := f.WriteString(line); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	record("start")
	for range units {
		time.Sleep(time.Duration(unitMS) * time.Millisecond)
		record("write")
	}
	record("end")
	os.Exit(exit)
}
