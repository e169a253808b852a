package main

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A store plugin child profiles its CPU on request, so the as-shipped
// path can be profiled on both sides of the boundary: SIGUSR1 starts a
// profile into the path written in FILE.pprof-to (FILE is the board file
// the child serves), SIGUSR2 stops it and moves it into place.

func serveProfileSignals(file string) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		var (
			f      *os.File
			target string
		)
		for sig := range sigs {
			switch {
			case sig == syscall.SIGUSR1 && f == nil:
				b, err := os.ReadFile(file + ".pprof-to")
				if err != nil {
					fmt.Fprintln(os.Stderr, "bench plugin: profile request:", err)
					continue
				}
				target = strings.TrimSpace(string(b))
				if f, err = os.Create(target + ".partial"); err != nil {
					fmt.Fprintln(os.Stderr, "bench plugin: profile:", err)
					continue
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					fmt.Fprintln(os.Stderr, "bench plugin: profile:", err)
					f.Close()
					f = nil
				}
			case sig == syscall.SIGUSR2 && f != nil:
				pprof.StopCPUProfile()
				f.Close()
				f = nil
				if err := os.Rename(target+".partial", target); err != nil {
					fmt.Fprintln(os.Stderr, "bench plugin: profile:", err)
				}
			}
		}
	}()
}

// storeChild is a store plugin child of this process and the board file
// it serves.
type storeChild struct {
	pid  int
	file string
}

// storeChildren lists this process's store plugin children from /proc.
func storeChildren() []storeChild {
	var out []storeChild
	me := os.Getpid()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses and may
		// hold spaces: state, then the parent's pid.
		rest := stat[bytes.LastIndexByte(stat, ')')+1:]
		fields := strings.Fields(string(rest))
		if len(fields) < 2 || fields[1] != strconv.Itoa(me) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(argv) == 3 && argv[1] == pluginFlag {
			out = append(out, storeChild{pid: pid, file: argv[2]})
		}
	}
	return out
}

// profileStoreChildren starts a CPU profile in the store plugin child
// whose board file path contains match, written to target; the returned
// func stops it and waits until it is written. A child that cannot be
// found or signalled leaves no profile, which is said on stderr.
func profileStoreChildren(match, target string) func() {
	var child *storeChild
	for _, c := range storeChildren() {
		if strings.Contains(c.file, match) {
			child = &c
			break
		}
	}
	if child == nil {
		fmt.Fprintf(os.Stderr, "bench: no store plugin child serving %q to profile\n", match)
		return func() {}
	}
	if err := os.WriteFile(child.file+".pprof-to", []byte(target), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench: profile request:", err)
		return func() {}
	}
	if err := syscall.Kill(child.pid, syscall.SIGUSR1); err != nil {
		fmt.Fprintln(os.Stderr, "bench: profile request:", err)
		return func() {}
	}
	return func() {
		if err := syscall.Kill(child.pid, syscall.SIGUSR2); err != nil {
			fmt.Fprintln(os.Stderr, "bench: profile stop:", err)
			return
		}
		// The child writes the profile's tail and renames it into place
		// when it handles the signal; wait for that (bounded).
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(target); err == nil {
				return
			}
		}
		fmt.Fprintln(os.Stderr, "bench: the store plugin child wrote no profile to", target)
	}
}
