package supervise

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/agentproc"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// A process that forks and exits in a loop ("pid hopping") may never be
// where a walk of /proc looks: by the time the walk reads the pid it
// listed, that process has exited and its child was forked after the
// listing. Empty walks alone must not end the sweep while such a tree
// lives: once Done, nothing of it may run. And Done must come: on a host
// of thousands of processes a walk that read every one of them listed
// only pids that had hopped on by the time it signalled them, and the
// supervisor chased the tree for as long as the tree lived. The chase
// here runs beside a crowd of processes and must end within a bound.
//
// The chase is a race between the supervisor's walks and the hopper's
// forks, and under the race detector a walk is about ten times slower
// (an attempt took seconds instead of a few hundred milliseconds), which
// tests a supervisor no one ships. So the supervisor here is the one that
// ships, the leasekeeper binary's claim-supervisor built without -race;
// the package's other tests run this code under the race detector.
func TestHoppingProcessDoesNotEscapeTheTree(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("needs perl for a process that forks and exits in a loop")
	}
	bin := filepath.Join(t.TempDir(), "leasekeeper")
	if err := agentproc.CachedBuild("./cmd/leasekeeper", bin); err != nil {
		t.Fatal(err)
	}
	shipped := Launcher{Path: bin, Args: []string{"claim-supervisor"}}
	startCrowd(t, 1000)
	for attempt := range 5 {
		dir := t.TempDir()
		stop := filepath.Join(dir, "stop")
		// The loop also ends once the test's directory is removed, so a
		// tree the supervisor missed does not outlive the test.
		line := newLifeline(t, dir)
		script := line.take + `if (fork()) { select(undef,undef,undef,0.2); exit 0 } while (-d "` + dir + `" && !-e "` + stop + `") { exit 0 if fork() }`
		c, err := Start(shipped, exec.Command("perl", "-e", script))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), chaseBound)
		code, err := c.Wait(ctx)
		cancel()
		if err != nil {
			_ = os.WriteFile(stop, nil, 0o644) // ends the loop, and so the chase
			t.Fatalf("attempt %d: the supervisor still chased the tree %v after its command exited", attempt, chaseBound)
		}
		if code != 0 {
			t.Fatalf("attempt %d: the hopper exited %d, want 0 (it could not take its lifeline?)", attempt, code)
		}
		// Done: whatever still holds the lifeline escaped.
		if !line.gone(goneBound) {
			_ = os.WriteFile(stop, nil, 0o644) // ends the escaped loop
			t.Fatalf("attempt %d: Done (survivors %v) but a process of the tree still runs %v later", attempt, c.Survivors(), goneBound)
		}
	}
}

// lifeline tells whether any process of a test's tree still runs, however
// fast its processes hop, where a look through /proc misses a hopper for
// the reason the kill walk must not. The tree's first process takes an
// exclusive flock on a file before it forks (take, a perl statement); a
// flock belongs to the open file, which every fork shares, so it is held
// until the last process that inherited it has exited.
type lifeline struct {
	path string
	take string
}

func newLifeline(t *testing.T, dir string) lifeline {
	path := filepath.Join(dir, "lifeline")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return lifeline{path: path, take: `use Fcntl ":flock"; open(my $lifeline, "<", "` + path + `") or die; flock($lifeline, LOCK_EX) or die; `}
}

// gone waits up to bound for the lock to be free, and reports whether it
// was: no process of the tree is left.
func (l lifeline) gone(bound time.Duration) bool {
	f, err := os.Open(l.path)
	if err != nil {
		return false
	}
	fd := int(f.Fd())
	took := make(chan error, 1)
	go func() {
		took <- syscall.Flock(fd, syscall.LOCK_EX)
		f.Close() // here, not by the caller: on a timeout the flock still waits on fd
	}()
	select {
	case err := <-took:
		return err == nil
	case <-time.After(bound):
		return false // the goroutine ends once the test ends the loop
	}
}

// goneBound is how long a lifeline may stay held once the supervisor (or
// the claimer) said the tree is done: only its own exit is left to come.
// It is short because an escaped hopper's orphans go to pid 1, and a pid 1
// slow to reap them fills the host's pid table while the test waits.
const goneBound = 5 * time.Second

// chaseBound is how long the hopper test lets a supervisor chase a tree
// whose first process has exited: it took seconds under the race detector
// beside the crowd, and, before the walk followed children lists, never
// ended on a busy host.
const chaseBound = time.Minute

// startCrowd starts n processes that sleep until the test ends: a host's
// process table of the size production hosts have, which a walk of every
// process pays for. One perl forks them all (no exec per process), and
// each leaves when the pipe on its stdin closes, the parent once it has
// collected them, so no process of the crowd outlives the test.
func startCrowd(t *testing.T, n int) {
	t.Helper()
	script := `$| = 1; for (1..` + strconv.Itoa(n) + `) { my $p = fork(); die "fork: $!" unless defined $p; if (!$p) { 1 while <STDIN>; exit 0 } } print "up\n"; 1 while <STDIN>; 1 while wait() > 0;`
	cmd := exec.Command("perl", "-e", script)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Wait()
	})
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "up\n" {
		t.Fatalf("the crowd of %d processes did not start: %q, %v", n, line, err)
	}
}

// TestDescendantsWalkMatchesTheScan: the walk along the children lists
// finds the tree a scan of every process finds, parents first, and skip
// prunes a child of the root with its subtree in both.
func TestDescendantsWalkMatchesTheScan(t *testing.T) {
	t.Parallel()
	// sh ─┬─ sleep
	//     └─ sh ─── sleep
	cmd := exec.Command("sh", "-c", "sleep 60 & (sleep 60 & wait) & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	root := cmd.Process.Pid
	t.Cleanup(func() {
		if ds, err := scanDescendants(root, nil); err == nil {
			for _, p := range ds {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	var scanned []int
	waitFor(t, "the tree of four processes to start", func() bool {
		ds, err := scanDescendants(root, nil)
		scanned = ds
		return err == nil && len(ds) == 3
	})
	walked, err := descendants(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sorted(walked), sorted(scanned)) {
		t.Fatalf("the walk found %v, the scan %v", walked, scanned)
	}
	seen := map[int]bool{root: true}
	for _, p := range walked {
		st, err := pidprobe.ReadStat(p)
		if err != nil || !seen[st.PPID] {
			t.Fatalf("walk %v lists %d before its parent (%+v, %v)", walked, p, st, err)
		}
		seen[p] = true
	}
	// Skip the subshell: its sleep goes with it.
	var sub int
	for _, p := range walked {
		if st, _ := pidprobe.ReadStat(p); st.PPID == root && st.Comm == "sh" {
			sub = p
		}
	}
	skip := func(p int) bool { return p == sub }
	w, err := descendants(root, skip)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := scanDescendants(root, skip)
	if err != nil {
		t.Fatal(err)
	}
	if sub == 0 || len(w) != 1 || !slices.Equal(w, sc) {
		t.Errorf("skipping the subshell %d: the walk found %v, the scan %v; want the one sleep of the root", sub, w, sc)
	}
}

func sorted(p []int) []int { p = slices.Clone(p); slices.Sort(p); return p }

// TestHoppingProcessDoesNotEscapeTheClaimer: a claimer whose supervisor
// died kills what the supervisor left (it is their subreaper), and that
// sweep too must end against a process that forks and exits in a loop
// beside a crowd: each kill round collects the orphans it killed, and a
// collection that reads every process of the host between the walk and
// the kills signals only pids that have hopped on.
func TestHoppingProcessDoesNotEscapeTheClaimer(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("needs perl for a process that forks and exits in a loop")
	}
	startCrowd(t, 1000)
	tr := newTree(t)
	stop := filepath.Join(tr.dir, "stop")
	t.Cleanup(func() { _ = os.WriteFile(stop, nil, 0o644) }) // ends the loop, escaped or not
	// Every process of the tree ends once "stop" appears or its directory
	// is removed, so none outlives the test even if the sweep misses it.
	line := newLifeline(t, tr.dir)
	script := line.take + `open(my $m, ">", "alive") or die; close $m; ` +
		`if (fork()) { select(undef, undef, undef, 0.05) while -e "alive" && !-e "stop"; exit 0 } ` +
		`open(my $f, ">", "hopping") or die; close $f; while (-e "alive" && !-e "stop") { exit 0 if fork() }`
	c := startClaimer(t, tr, `exec perl -e '`+script+`'`, false)
	waitFor(t, "the command to hop", func() bool {
		_, err := os.Stat(filepath.Join(tr.dir, "hopping"))
		return err == nil
	})
	if err := syscall.Kill(c.superPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	said := make(chan string, 1)
	go func() { line, _ := c.out.ReadString('\n'); said <- line }()
	select {
	case line := <-said:
		if f := strings.Fields(line); len(f) != 4 || f[0] != "done" {
			t.Fatalf("claimer said %q, want done", line)
		}
	case <-time.After(chaseBound):
		t.Fatalf("the claimer still chased the tree %v after its supervisor died", chaseBound)
	}
	if !line.gone(goneBound) {
		t.Fatalf("the claimer is done but a process of the tree still runs %v later", goneBound)
	}
}
