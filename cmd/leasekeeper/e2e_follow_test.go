package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// followProc is a background `leasekeeper events --follow --json`.
type followProc struct {
	cmd            *exec.Cmd
	stdout, stderr *agentproc.Buffer
	done           chan struct{}
	code           int
}

func (e *env) startFollow(args ...string) *followProc {
	e.t.Helper()
	cmd := exec.Command(binary, append([]string{"events", "--follow", "--json"}, args...)...)
	cmd.Env = e.Environ()
	cmd.Dir = e.Dir
	p := &followProc{cmd: cmd, stdout: &agentproc.Buffer{}, stderr: &agentproc.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() {
		var ee *exec.ExitError
		if err := cmd.Wait(); errors.As(err, &ee) {
			p.code = ee.ExitCode()
		}
		close(p.done)
	}()
	e.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

// seqs are the sequence numbers the follower has printed so far, in order.
func (p *followProc) seqs(t *testing.T) []int64 {
	t.Helper()
	var out []int64
	sc := bufio.NewScanner(strings.NewReader(p.stdout.String()))
	for sc.Scan() {
		var ev board.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // a line still being written
		}
		out = append(out, ev.Seq)
	}
	return out
}

func (p *followProc) printed(t *testing.T, seq int64) bool {
	return slices.Contains(p.seqs(t), seq)
}

// TestE2EEventsFollowSurvivesRestart: `events --follow` outlives its agent.
// Events are written before the agent stops, while no agent serves the
// follower's socket (another agent on the same store, on another socket),
// and after a new agent comes back on the socket; the follower prints every
// one of them exactly once, in order, says on stderr that it lost the
// connection and where it resumed, and exits 0 on SIGINT.
func TestE2EEventsFollowSurvivesRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.Start()
	e.MustRun("card", "create", "before-1")
	e.MustRun("card", "create", "before-2")
	beforeLast := lastSeq(t, e)

	f := e.startFollow()
	e.WaitFor(20*time.Second, "the follower to print the events so far", func() bool { return f.printed(t, beforeLast) })

	e.Stop()
	e.WaitFor(20*time.Second, "the follower to notice the agent is gone", func() bool {
		return strings.Contains(f.stderr.String(), "agent connection lost")
	})

	// The gap: the same store served on another socket, so the follower
	// cannot see these writes as they happen.
	home := e.Socket
	e.Socket = filepath.Join(e.Dir, "gap.sock")
	e.WriteConfig("")
	e.Start()
	e.MustRun("card", "create", "gap-1")
	e.MustRun("card", "move", "gap-1", board.StateBlocked)
	gapLast := lastSeq(t, e)
	e.Stop()
	if got := f.seqs(t); slices.ContainsFunc(got, func(s int64) bool { return s > beforeLast }) {
		t.Fatalf("the follower printed %v while no agent served its socket (the log was at %d)", got, beforeLast)
	}

	e.Socket = home
	e.WriteConfig("")
	e.Start()
	e.MustRun("card", "create", "after-1")
	e.MustRun("card", "label", "after-1", "--add", "x")
	afterLast := lastSeq(t, e)
	if afterLast <= gapLast || gapLast <= beforeLast {
		t.Fatalf("log positions before %d, gap %d, after %d: each phase must write", beforeLast, gapLast, afterLast)
	}
	e.WaitFor(30*time.Second, "the follower to resume and print the events since", func() bool { return f.printed(t, afterLast) })

	if err := f.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the follower is still running 10s after SIGINT; stderr:\n%s", f.stderr.String())
	}
	if f.code != 0 {
		t.Errorf("follower exit after SIGINT = %d, want 0; stderr:\n%s", f.code, f.stderr.String())
	}

	// Exactly the log, once each, in order, up to where the follower
	// stopped (at least the last write above).
	got := f.seqs(t)
	var want []int64
	for _, ev := range e.Events() {
		if ev.Seq <= got[len(got)-1] {
			want = append(want, ev.Seq)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("the follower printed seqs\n%v\nthe log holds\n%v", got, want)
	}

	// stderr holds only the notices: the loss, and the resume after the
	// last event printed before it. (A resume may be followed by another
	// loss if it caught the stopping agent's last moment; each still
	// resumes after that event, since nothing came in between.)
	stderr := f.stderr.String()
	lost := regexp.MustCompile(`^leasekeeper: agent connection lost \(.*\); reconnecting…$`)
	resumed := regexp.MustCompile(`^leasekeeper: resumed after seq (\d+)$`)
	var losses, resumes int
	for _, line := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		if lost.MatchString(line) {
			losses++
			continue
		}
		m := resumed.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("stderr line %q is neither notice", line)
			continue
		}
		resumes++
		if n, _ := strconv.ParseInt(m[1], 10, 64); n != beforeLast {
			t.Errorf("resumed after seq %d, want %d (the last event printed before the agent went away)", n, beforeLast)
		}
	}
	if losses == 0 || resumes != losses {
		t.Errorf("%d loss and %d resume notices, want one resume per loss, at least one:\n%s", losses, resumes, stderr)
	}
}

// TestE2EEventsFollowRefusalIsFinal: an answer no reconnect can change
// ends --follow at once with the error.
func TestE2EEventsFollowRefusalIsFinal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.Start()
	f := e.startFollow("--after", "-1")
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("events --follow --after -1 still running after 10s; stderr:\n%s", f.stderr.String())
	}
	if f.code != exitError || !strings.Contains(f.stderr.String(), "bad_request") {
		t.Errorf("exit %d, stderr %q: want exit %d and the bad_request refusal", f.code, f.stderr.String(), exitError)
	}
}
