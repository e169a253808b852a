package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// The tests of this file hold `leasekeeper claim` to its promise about
// CMD's process tree: however the claim ends, nothing descended from CMD
// survives it — not a background job, not a process that moved to a
// session of its own, not a daemon that double-forked away from its
// parent.

// treeShapes are the CMD scripts. Each records the pid of the process that
// tries to outlive it in bg.pid, then writes "ready" once that process is
// where it wants to be, and then either keeps running (hold) or, once the
// test has looked and created "go", exits 0 (exit). Each first points its
// output away from claim's pipes (treePrelude), so a survivor is reported
// as one rather than as a claimer whose output never ends.
const treePrelude = `exec </dev/null >/dev/null 2>&1
then_exit() { [ "$1" = exit ] || return 0; while [ ! -f go ]; do sleep 0.01; done; exit 0; }
`

var treeShapes = []struct {
	name string
	// script is run by `sh -c`; $1 is "hold" (keep running) or "exit".
	script string
	// settled reports whether the escaping process has reached the shape
	// the case is about (a session of its own, say), read from /proc.
	settled func(pid int) bool
}{
	{
		name:    "background job",
		script:  treePrelude + `sleep 600 & echo $! > bg.pid; echo ready > ready; then_exit "$1"; sleep 600`,
		settled: func(pid int) bool { return procComm(pid) == "sleep" },
	},
	{
		name:   "new session",
		script: treePrelude + `setsid sleep 600 & echo $! > bg.pid; echo ready > ready; then_exit "$1"; sleep 600`,
		settled: func(pid int) bool {
			st, ok := readProcStat(pid)
			return ok && st.comm == "sleep" && st.session == pid
		},
	},
	{
		name: "double-forked daemon",
		script: treePrelude + `(setsid sh -c 'sleep 600 & echo $! > bg.pid' &)
while [ ! -s bg.pid ]; do sleep 0.01; done
echo ready > ready; then_exit "$1"; sleep 600`,
		settled: func(pid int) bool {
			// The daemon's parents have exited: it was re-parented.
			st, ok := readProcStat(pid)
			if !ok || st.comm != "sleep" {
				return false
			}
			parent, ok := readProcStat(st.ppid)
			return ok && parent.comm != "sh"
		},
	},
}

// TestE2EClaimEndKillsCommandTree ends a claim three ways — an operator's
// force-release, a SIGKILL of the claimer, CMD's own exit — under each
// tree shape, and checks that every process of the tree is gone: the ones
// the script recorded and every descendant of the claimer seen before the
// end.
func TestE2EClaimEndKillsCommandTree(t *testing.T) {
	t.Parallel()
	ends := []struct {
		name string
		arg  string // the script's $1
		// end ends the claim and returns claim's exit code.
		end func(t *testing.T, e *env, claim *claimProc) int
		// waitGone: the tree dies after claim exits (the claimer was
		// killed, so nothing waited for the tree); otherwise the tree is
		// gone by the time claim exits.
		waitGone bool
		wantCode int
	}{
		{
			name: "force release", arg: "hold", wantCode: claimExitLost,
			end: func(t *testing.T, e *env, claim *claimProc) int {
				e.MustRun("card", "release", "c1", "--force")
				return claim.wait(t, 20*time.Second)
			},
		},
		{
			name: "claimer killed with SIGKILL", arg: "hold", waitGone: true, wantCode: 128 + int(syscall.SIGKILL),
			end: func(t *testing.T, e *env, claim *claimProc) int {
				if err := claim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				return claim.wait(t, 10*time.Second)
			},
		},
		{
			name: "command exits", arg: "exit", wantCode: 0,
			end: func(t *testing.T, e *env, claim *claimProc) int {
				if err := os.WriteFile(filepath.Join(e.Dir, "go"), nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return claim.wait(t, 20*time.Second)
			},
		},
	}
	for _, shape := range treeShapes {
		for _, end := range ends {
			t.Run(shape.name+"/"+end.name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, "lease: 3s\n")
				e.Start()
				e.MustRun("card", "create", "c1")

				claim := e.startClaim("c1", "--", "sh", "-c", shape.script, "sh", end.arg)
				bg := e.workerPID("bg.pid")
				t.Cleanup(func() { _ = syscall.Kill(bg, syscall.SIGKILL) })
				agentproc.WaitFor(t, 20*time.Second, "the command to be ready", func() bool {
					_, err := os.Stat(filepath.Join(e.Dir, "ready"))
					return err == nil
				})
				agentproc.WaitFor(t, 20*time.Second, "the escaping process to settle", func() bool { return shape.settled(bg) })

				tree := map[int]bool{bg: true}
				for _, pid := range descendants(claim.cmd.Process.Pid) {
					tree[pid] = true
				}
				for pid := range tree {
					t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
				}

				if got := end.end(t, e, claim); got != end.wantCode {
					t.Errorf("claim exit = %d, want %d; output:\n%s", got, end.wantCode, claim.output.String())
				}
				alive := func() []int {
					var out []int
					for pid := range tree {
						if !dead(pid) {
							out = append(out, pid)
						}
					}
					return out
				}
				if end.waitGone {
					// Nothing to block on in another process's death: poll,
					// bounded, and report what is left below.
					deadline := time.Now().Add(10 * time.Second)
					for len(alive()) > 0 && time.Now().Before(deadline) {
						time.Sleep(20 * time.Millisecond)
					}
				}
				for _, pid := range alive() {
					st, _ := readProcStat(pid)
					t.Errorf("pid %d (%s, parent %d, session %d) survived the claim's end", pid, st.comm, st.ppid, st.session)
				}
			})
		}
	}
}

// procStat is what these tests read of /proc/PID/stat.
type procStat struct {
	comm    string
	state   byte
	ppid    int
	session int
}

// readProcStat parses /proc/PID/stat. The command name is field 2, in
// parentheses, and may itself hold spaces and parentheses: the fields after
// it start after the last ')'.
func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return procStat{}, false
	}
	f := strings.Fields(s[closing+1:])
	if len(f) < 4 {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	sid, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{comm: s[open+1 : closing], state: f[0][0], ppid: ppid, session: sid}, true
}

func procComm(pid int) string {
	st, _ := readProcStat(pid)
	return st.comm
}

// descendants lists the live processes descended from pid, from one scan
// of /proc.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, ent := range ents {
		p, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if st, ok := readProcStat(p); ok && st.state != 'Z' {
			children[st.ppid] = append(children[st.ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}
