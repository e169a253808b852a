package plugins

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
	"github.com/leasekeeper/leasekeeper/storespec"
)

// The test plugin's blocking verb (see internal/testplugin).
const (
	hangCard = "hang-in-get"
	hangLine = "testplugin: GetCard is blocking"
)

// launchBolt launches the test plugin serving a bbolt file in t's temp dir.
func launchBolt(t *testing.T, logs *logWatch, minBackoff time.Duration) *Proxy {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := Launch(ctx, LaunchConfig{
		Cmd:        testPluginCmd(t, ""),
		Child:      &storespec.Spec{Backend: "bolt", Path: filepath.Join(t.TempDir(), "board.db"), Board: board.DefaultBoard(true), Lease: 30 * time.Second},
		Logger:     logs.logger(),
		MinBackoff: minBackoff,
		MaxBackoff: 2 * minBackoff,
	})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// killMidCall starts GetCard(hangCard), waits until the plugin is inside
// it, SIGKILLs the plugin and returns the call's error.
func killMidCall(t *testing.T, p *Proxy, logs *logWatch) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := p.GetCard(t.Context(), board.GetCardParams{ID: hangCard})
		errc <- err
	}()
	logs.wait(t, hangLine, 30*time.Second)
	pid := p.Status().PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	select {
	case err := <-errc:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the in-flight call did not return within 30s of the plugin's death")
		return nil
	}
}

func TestCrashMidCallIsOutcomeUnknownAndThePluginRestarts(t *testing.T) {
	t.Parallel()
	logs := newLogWatch()
	p := launchBolt(t, logs, 10*time.Millisecond)
	ctx := t.Context()
	const a = "worker-a-101"

	if _, err := p.CreateCard(ctx, board.CreateCardParams{ID: "c1", Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	card, err := p.Claim(ctx, board.ClaimParams{Card: "c1", Marker: a, Lease: 30 * time.Second})
	tok := card.Token()
	if err != nil {
		t.Fatal(err)
	}
	first := p.Status()
	if first.State != StateUp || first.PID == 0 || first.ProtocolVersion != wire.ProtocolVersion {
		t.Fatalf("status after launch: %+v", first)
	}

	err = killMidCall(t, p, logs)
	if !errors.Is(err, board.ErrOutcomeUnknown) {
		t.Fatalf("in-flight call: got %v, want ErrOutcomeUnknown", err)
	}
	if !strings.Contains(err.Error(), "outcome unknown") {
		t.Errorf("in-flight call error %q does not say outcome unknown", err)
	}

	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.WaitUp(waitCtx); err != nil {
		t.Fatalf("WaitUp after the crash: %v", err)
	}
	st := p.Status()
	if st.State != StateUp || st.Restarts != 1 || st.PID == first.PID || st.PID == 0 {
		t.Errorf("status after the restart: %+v, want up, 1 restart, a new pid (old %d)", st, first.PID)
	}
	if !strings.Contains(st.LastError, "signal: killed") {
		t.Errorf("status last error %q does not name the crash", st.LastError)
	}

	// The restarted plugin serves the same file: the claim and its fence
	// survived the crash.
	c, err := p.GetCard(ctx, board.GetCardParams{ID: "c1"})
	if err != nil {
		t.Fatalf("GetCard after the restart: %v", err)
	}
	if c.Claim != a || c.ClaimEpoch != tok.Epoch {
		t.Errorf("card after the restart holds %q@%d, want %q@%d", c.Claim, c.ClaimEpoch, a, tok.Epoch)
	}
	if err := p.ReleaseOwned(ctx, board.OwnedParams{Card: "c1", Token: tok}); err != nil {
		t.Errorf("ReleaseOwned with the pre-crash token: %v", err)
	}
}

func TestCallsWhileDownFailFastAsUnavailable(t *testing.T) {
	t.Parallel()
	logs := newLogWatch()
	// A backoff far longer than the test keeps the plugin down.
	p := launchBolt(t, logs, time.Hour)

	if err := killMidCall(t, p, logs); !errors.Is(err, board.ErrOutcomeUnknown) {
		t.Fatalf("in-flight call: got %v, want ErrOutcomeUnknown", err)
	}
	waitState(t, p, StateDown, 30*time.Second)

	_, err := p.GetCard(t.Context(), board.GetCardParams{ID: "c1"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("call while down: got %v, want ErrUnavailable", err)
	}
	if errors.Is(err, board.ErrOutcomeUnknown) {
		t.Errorf("call while down: %v wraps ErrOutcomeUnknown, but nothing was sent", err)
	}
	if !strings.Contains(err.Error(), "unavailable") {
		t.Errorf("call while down: %q does not say unavailable", err)
	}
	st := p.Status()
	if st.State != StateDown || st.PID != 0 || st.LastError == "" {
		t.Errorf("status while down: %+v", st)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := p.WaitUp(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitUp while down: got %v, want the ctx's deadline", err)
	}
}

// TestHostileNamesLeaveThePluginRunning sends a real plugin process the
// names any peer of the agent's socket can send — not UTF-8, NUL, too long
// — on reads and writes. Each is the caller's mistake, refused as
// ErrInvalidArgument, and the plugin is never replaced for it: same
// process, no restart, and the claim it holds keeps renewing.
func TestHostileNamesLeaveThePluginRunning(t *testing.T) {
	t.Parallel()
	logs := newLogWatch()
	p := launchBolt(t, logs, 10*time.Millisecond)
	ctx := t.Context()
	const a = "worker-a-101"
	if _, err := p.CreateCard(ctx, board.CreateCardParams{ID: "c1"}); err != nil {
		t.Fatal(err)
	}
	card, err := p.Claim(ctx, board.ClaimParams{Card: "c1", Marker: a, Lease: 30 * time.Second})
	tok := card.Token()
	if err != nil {
		t.Fatal(err)
	}
	before := p.Status()

	for _, name := range []string{"\xff", "\xc0", "c1\xc3", "\xed\xa0\x80", "\x00", "c1\nx", strings.Repeat("x", board.MaxIDBytes+1)} {
		calls := map[string]func() error{
			"GetCard":    func() error { _, err := p.GetCard(ctx, board.GetCardParams{ID: name}); return err },
			"GetRun":     func() error { _, err := p.GetRun(ctx, board.GetRunParams{ID: name}); return err },
			"ListCards":  func() error { _, err := p.ListCards(ctx, board.ListCardsParams{State: name}); return err },
			"Dependents": func() error { _, err := p.Dependents(ctx, board.DependentsParams{ID: name}); return err },
			"CreateCard": func() error { _, err := p.CreateCard(ctx, board.CreateCardParams{ID: name}); return err },
			"Claim": func() error {
				_, err := p.Claim(ctx, board.ClaimParams{Card: name, Marker: a, Lease: time.Second})
				return err
			},
			"SetLastRunOwned": func() error {
				return p.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: name})
			},
			"SetLabels": func() error {
				_, err := p.SetLabels(ctx, board.SetLabelsParams{Card: "c1", Labels: []string{name}, Actor: ""})
				return err
			},
		}
		for verb, call := range calls {
			err := call()
			if !errors.Is(err, board.ErrInvalidArgument) || errors.Is(err, board.ErrOutcomeUnknown) {
				t.Errorf("%s(%q) = %v, want ErrInvalidArgument and nothing else", verb, name, err)
			}
		}
	}

	res, err := p.RenewClaims(ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: "c1", Token: tok}}, Lease: 30 * time.Second})
	if err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("renewing the held claim after the hostile calls: %v %+v", err, res)
	}
	if st := p.Status(); st.State != StateUp || st.PID != before.PID || st.Restarts != before.Restarts {
		t.Errorf("plugin after hostile names: %+v, want still up as pid %d with %d restarts", st, before.PID, before.Restarts)
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for _, l := range logs.lines {
		if strings.Contains(l, "replacing the plugin") {
			t.Errorf("the proxy condemned the plugin: %s", l)
		}
	}
}

func TestCloseStopsThePlugin(t *testing.T) {
	t.Parallel()
	p := launchBolt(t, newLogWatch(), 10*time.Millisecond)
	p.mu.Lock()
	r := p.cur.runner
	p.mu.Unlock()

	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !r.exited() {
		t.Error("the plugin process was not reaped by Close")
	}
	// Graceful: the plugin closed its store and exited on its own.
	if r.waitErr != nil {
		t.Errorf("plugin exit after Close: %v, want a clean exit", r.waitErr)
	}
	if st := p.Status(); st.State != StateClosed {
		t.Errorf("status after Close: %+v", st)
	}
	if _, err := p.GetCard(t.Context(), board.GetCardParams{ID: "c1"}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("call after Close: got %v, want ErrUnavailable", err)
	}
	if err := p.WaitUp(t.Context()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("WaitUp after Close: got %v, want ErrUnavailable", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestLaunchFailuresAreClear(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cmd  func(t *testing.T) func() *exec.Cmd
		want []string
	}{
		{
			name: "missing binary",
			cmd: func(t *testing.T) func() *exec.Cmd {
				missing := filepath.Join(t.TempDir(), "no-such-plugin")
				return func() *exec.Cmd { return exec.Command(missing) }
			},
			want: []string{"no-such-plugin", "missing or not executable"},
		},
		{
			name: "not a plugin",
			cmd: func(*testing.T) func() *exec.Cmd {
				return func() *exec.Cmd { return exec.Command("/bin/sh", "-c", "echo hello from a shell script") }
			},
			want: []string{"not a leasekeeper store plugin", "hello from a shell script"},
		},
		{
			name: "another protocol version",
			cmd:  func(t *testing.T) func() *exec.Cmd { return testPluginCmd(t, "wrong-version") },
			want: []string{"another store protocol version", "Plugin version: " + strconv.Itoa(wire.ProtocolVersion+98)},
		},
		{
			name: "store fails to open",
			cmd:  func(t *testing.T) func() *exec.Cmd { return testPluginCmd(t, "fail-open") },
			want: []string{"exited during start", "the disk is on fire"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			p, err := Launch(ctx, LaunchConfig{Cmd: tc.cmd(t), StartTimeout: 30 * time.Second})
			if err == nil {
				p.Close()
				t.Fatal("Launch succeeded, want an error")
			}
			t.Logf("Launch error:\n%v", err)
			if !errors.Is(err, ErrStart) {
				t.Errorf("got %v, want ErrStart", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestLaunchHonoursItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Launch(ctx, LaunchConfig{Cmd: testPluginCmd(t, "")})
	if !errors.Is(err, ErrStart) || !errors.Is(err, context.Canceled) {
		t.Errorf("Launch with a cancelled ctx: got %v, want ErrStart and context.Canceled", err)
	}
}

// TestFailedRestartsAreRetried makes the first two restarts fail (the
// binary is gone) and checks the supervisor keeps trying, reports the
// failure, and recovers once the binary is back.
func TestFailedRestartsAreRetried(t *testing.T) {
	t.Parallel()
	logs := newLogWatch()
	good := testPluginCmd(t, "")
	missing := filepath.Join(t.TempDir(), "plugin-being-upgraded")
	var starts atomic.Int32
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := Launch(ctx, LaunchConfig{
		Cmd: func() *exec.Cmd {
			if n := starts.Add(1); n == 2 || n == 3 {
				return exec.Command(missing)
			}
			return good()
		},
		Child:      &storespec.Spec{Backend: "bolt", Path: filepath.Join(t.TempDir(), "board.db"), Board: board.DefaultBoard(true)},
		Logger:     logs.logger(),
		MinBackoff: time.Millisecond,
		MaxBackoff: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() { p.Close() })

	if err := killMidCall(t, p, logs); !errors.Is(err, board.ErrOutcomeUnknown) {
		t.Fatalf("in-flight call: got %v, want ErrOutcomeUnknown", err)
	}
	logs.wait(t, "plugin-being-upgraded", 30*time.Second)
	if err := p.WaitUp(ctx); err != nil {
		t.Fatalf("WaitUp: %v", err)
	}
	if got, want := starts.Load(), int32(4); got != want {
		t.Errorf("plugin starts: got %d, want %d (launch, two failed restarts, one good)", got, want)
	}
	st := p.Status()
	if st.Restarts != 1 || !strings.Contains(st.LastError, "plugin-being-upgraded") {
		t.Errorf("status: %+v, want 1 restart and the last failed restart as last error", st)
	}
	if _, err := p.GetCard(ctx, board.GetCardParams{ID: "nope"}); !errors.Is(err, board.ErrNotFound) {
		t.Errorf("call after recovery: got %v, want ErrNotFound", err)
	}
}

// TestEveryVerbGoesThroughTheSupervisor: every board.Store and
// board.BoardAdmin verb of the Proxy with a context fails fast once the
// proxy is closed: each goes through the one supervisor, none past it.
func TestEveryVerbGoesThroughTheSupervisor(t *testing.T) {
	t.Parallel()
	p := launchBolt(t, newLogWatch(), 10*time.Millisecond)
	p.Close()
	pv := reflect.ValueOf(p)
	ctxType := reflect.TypeFor[context.Context]()
	checked := 0
	for _, it := range []reflect.Type{reflect.TypeFor[board.Store](), reflect.TypeFor[board.BoardAdmin]()} {
		for m := range it.Methods() {
			if m.Type.NumIn() == 0 || m.Type.In(0) != ctxType {
				continue // Board, Traits, Close: no call to the plugin
			}
			args := []reflect.Value{reflect.ValueOf(t.Context())}
			for i := 1; i < m.Type.NumIn(); i++ {
				args = append(args, reflect.Zero(m.Type.In(i)))
			}
			out := pv.MethodByName(m.Name).Call(args)
			err, _ := out[len(out)-1].Interface().(error)
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), m.Name) {
				t.Errorf("%s on a closed proxy: %v, want ErrUnavailable naming the verb", m.Name, err)
			}
			checked++
		}
	}
	if checked < 30 {
		t.Errorf("checked %d verbs; the store has more", checked)
	}
}
