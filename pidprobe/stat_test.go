package pidprobe

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// statLine builds a stat line the way the kernel prints it: pid, (comm),
// then fields 3..52.
func statLine(pid int, comm string, state byte, ppid, pgid, sid, threads int, start int64) string {
	f := make([]string, 50) // fields 3..52
	for i := range f {
		f[i] = "0"
	}
	f[0] = string(state)
	f[4-3], f[5-3], f[6-3] = fmt.Sprint(ppid), fmt.Sprint(pgid), fmt.Sprint(sid)
	f[20-3], f[22-3] = fmt.Sprint(threads), fmt.Sprint(start)
	return fmt.Sprintf("%d (%s) %s\n", pid, comm, strings.Join(f, " "))
}

func TestParseStat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		comm string
	}{
		{"plain", "sleep"},
		{"spaces", "my worker 2"},
		{"a closing paren and a fake field", "x) R 1 2 3"},
		{"parens both ways", ")(("},
		{"empty", ""},
		{"newline", "a\nb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			line := statLine(4711, tt.comm, 'S', 42, 43, 44, 3, 123456789)
			got, err := ParseStat([]byte(line))
			if err != nil {
				t.Fatalf("ParseStat(%q): %v", line, err)
			}
			want := ProcStat{PID: 4711, Comm: tt.comm, State: 'S', PPID: 42, PGID: 43, SID: 44, NumThreads: 3, StartTicks: 123456789}
			if got != want {
				t.Errorf("ParseStat(%q) = %+v, want %+v", line, got, want)
			}
		})
	}
	for _, bad := range []string{
		"", "4711 sleep S 1", "4711 (sleep", "x (sleep) S 1 2 3",
		"4711 (sleep) S 1 2 3",                // too few fields
		statLine(1, "a", 'S', 1, 1, 1, 1, -5), // a negative start
		strings.Replace(statLine(1, "a", 'S', 1, 1, 1, 1, 5), " S ", " SS ", 1),
	} {
		if _, err := ParseStat([]byte(bad)); !errors.Is(err, errStatFormat) {
			t.Errorf("ParseStat(%q) err = %v, want a format error", bad, err)
		}
	}
}

// A process that renames itself to something that looks like stat fields
// is still read right from the real /proc.
func TestReadStatOfARenamedProcess(t *testing.T) {
	t.Parallel()
	// bash's exec -a sets argv[0], not comm; the comm comes from the
	// file name, so copy sleep to a file whose name is the trap.
	dir := t.TempDir()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	trap := dir + "/a) Z 1 1 1"
	if err := os.WriteFile(trap, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(trap, "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitState(t, cmd.Process.Pid, "S")
	st, err := ReadStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.Comm != "a) Z 1 1 1" || st.State != 'S' || st.PPID != os.Getpid() || st.Zombie() {
		t.Errorf("ReadStat = %+v, want comm %q, state S, parent %d", st, "a) Z 1 1 1", os.Getpid())
	}
	again, err := ReadStat(cmd.Process.Pid)
	if err != nil || again.StartTicks != st.StartTicks || st.StartTicks == 0 {
		t.Errorf("start ticks read twice = %d then %d (%v), want one non-zero value", st.StartTicks, again.StartTicks, err)
	}
}

func TestReadStatOfNoProcess(t *testing.T) {
	t.Parallel()
	if _, err := ReadStat(1 << 30); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadStat of a free pid: err = %v, want os.ErrNotExist", err)
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte(statLine(1, "init", 'S', 0, 1, 1, 1, 2)))
	f.Add([]byte(statLine(2, "a) b (c", 'Z', 1, 1, 1, 1, 99)))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseStat(b)
		if err != nil {
			return
		}
		if st.StartTicks < 0 {
			t.Errorf("ParseStat(%q) start ticks %d < 0", b, st.StartTicks)
		}
		if !strings.Contains(string(b), "("+st.Comm+")") {
			t.Errorf("ParseStat(%q) comm %q is not what the parentheses hold", b, st.Comm)
		}
	})
}
