package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
)

// machine describes where the run happened.
type machine struct {
	CPU        string
	Cores      int
	GOMAXPROCS int
	Memory     string
	Kernel     string
	Go         string
	Disk       string
}

func describeMachine(dir string) machine {
	m := machine{
		CPU:        "unknown",
		Cores:      runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Memory:     "unknown",
		Kernel:     "unknown",
		Go:         runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		Disk:       "unknown",
	}
	if v := procField("/proc/cpuinfo", "model name"); v != "" {
		m.CPU = v
	}
	if v := procField("/proc/meminfo", "MemTotal"); v != "" {
		m.Memory = v
	}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		m.Kernel = utsString(u.Sysname[:]) + " " + utsString(u.Release[:])
	}
	// findmnt names the device, filesystem and mount options of the
	// directory the stores are written in; without it, say so rather than
	// guess.
	if out, err := exec.Command("findmnt", "-no", "SOURCE,FSTYPE,OPTIONS", "-T", dir).Output(); err == nil {
		m.Disk = strings.Join(strings.Fields(string(out)), " ")
	}
	return m
}

func utsString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// procField returns the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loadavg is the first three fields of /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// rssBytes reads this process's resident set (VmRSS) and its peak (VmHWM).
func rssBytes() (rss, peak int64) {
	return statusBytes("VmRSS"), statusBytes("VmHWM")
}

// rssSplit is VmRSS's two halves that matter here: anonymous memory (the
// Go heap and stacks) and file-backed pages (the executable's code and
// bbolt's read-only mmap of the board file, reclaimable by the kernel).
func rssSplit() (anon, file int64) {
	return statusBytes("RssAnon"), statusBytes("RssFile")
}

// statusBytes reads one "<n> kB" field of /proc/self/status.
func statusBytes(key string) int64 {
	var kb int64
	fmt.Sscanf(procField("/proc/self/status", key), "%d kB", &kb)
	return kb << 10
}
