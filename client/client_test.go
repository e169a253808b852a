package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	"github.com/leasekeeper/leasekeeper/socketapi/socketapitest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitDone waits for a claim context with a bounded deadline and returns
// its cause.
func waitDone(t *testing.T, ctx context.Context, within time.Duration) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(within):
		t.Fatalf("claim context still live after %v", within)
		return nil
	}
}

func TestWorkerFlow(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{})
	a.Card(t, "job")
	ctx := testCtx(t)
	c := &client.Client{Socket: a.Path}

	cl, err := c.Claim(ctx, "job")
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if got, want := cl.Token().Marker, board.WorkerMarker(mustHost(t), os.Getpid()); got != want {
		t.Errorf("marker = %q, want %q (this process, from the kernel)", got, want)
	}
	run, err := cl.StartRun(ctx, client.RunSpec{Checkpoint: "cp0"})
	if err != nil {
		t.Fatalf("StartRun: %v", err)
	}
	if run.Owner != cl.Token().Marker || run.Epoch != cl.Token().Epoch || run.PID != os.Getpid() || run.PIDStart == 0 {
		t.Errorf("run owner = %q/%d pid %d start %d; want the claim's token, this pid and its start time", run.Owner, run.Epoch, run.PID, run.PIDStart)
	}
	if changed, err := cl.SetState(ctx, board.StateInProgress, client.From(board.StateReady)); err != nil || !changed {
		t.Fatalf("SetState in_progress: changed %v, err %v", changed, err)
	}
	if err := cl.SetAwaitingInput(ctx, true); err != nil {
		t.Fatalf("SetAwaitingInput: %v", err)
	}
	if err := cl.SetLastRun(ctx, run.ID); err != nil {
		t.Fatalf("SetLastRun: %v", err)
	}
	if err := cl.SetGaveUp(ctx, &board.GaveUp{RunID: run.ID, Attempts: 3, Reason: "three strikes"}); err != nil {
		t.Fatalf("SetGaveUp: %v", err)
	}
	if mid, err := c.GetCard(ctx, "job"); err != nil || mid.GaveUp == nil || mid.GaveUp.Reason != "three strikes" || mid.GaveUp.Attempts != 3 {
		t.Fatalf("after SetGaveUp: card gave_up %+v, err %v; want the stamp written", mid.GaveUp, err)
	}
	if err := cl.SetGaveUp(ctx, nil); err != nil {
		t.Fatalf("SetGaveUp(nil): %v", err)
	}
	orphaned := board.FailureProcessOrphaned
	if _, err := cl.UpdateRun(ctx, run.ID, apitype.UpdateRunRequest{FailureCode: &orphaned}); !errors.Is(err, board.ErrInvalidArgument) {
		t.Errorf("UpdateRun PROCESS_ORPHANED: err %v, want ErrInvalidArgument (reserved for the watchdog)", err)
	}
	finished := board.RunFinished
	if _, err := cl.UpdateRun(ctx, run.ID, apitype.UpdateRunRequest{Status: &finished}); err != nil {
		t.Fatalf("UpdateRun finished: %v", err)
	}
	if _, err := cl.SetState(ctx, board.StateDone, client.WithReason(board.ReasonRunFinished)); err != nil {
		t.Fatalf("SetState done: %v", err)
	}
	if err := cl.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if cause := waitDone(t, cl.Context(), 5*time.Second); !errors.Is(cause, client.ErrReleased) {
		t.Errorf("cause after Release = %v, want ErrReleased", cause)
	}

	card, err := c.GetCard(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if card.State != board.StateDone || card.Claimed() || card.LastRunID != run.ID || !card.AwaitingInput || card.GaveUp != nil {
		t.Errorf("card = state %q claim %q last_run %q awaiting %v gave_up %+v; want done, free, %q, true, cleared",
			card.State, card.Claim, card.LastRunID, card.AwaitingInput, card.GaveUp, run.ID)
	}
	got, err := c.GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != board.RunFinished {
		t.Errorf("run status = %q, want finished", got.Status)
	}
	if held := a.Loop.Held(); len(held) != 0 {
		t.Errorf("heartbeat still holds %d claims after release", len(held))
	}
}

func mustHost(t *testing.T) string {
	h, err := pidprobe.Hostname()
	if err != nil || h == "" {
		return "testhost"
	}
	return h
}

func TestClaimLostOnForceRelease(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{})
	a.Card(t, "stolen")
	ctx := testCtx(t)
	c := &client.Client{Socket: a.Path}
	cl, err := c.Claim(ctx, "stolen")
	if err != nil {
		t.Fatal(err)
	}

	// A raw watcher of the same process sees the frame itself.
	frames := make(chan apitype.Frame, 16)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	ready := make(chan struct{})
	var once sync.Once
	go c.Watch(wctx, -1, func(f apitype.Frame) error {
		once.Do(func() { close(ready) })
		if f.Type == apitype.FrameClaimLost {
			frames <- f
		}
		return nil
	})
	<-ready

	op := &client.Client{Socket: a.Path}
	fr, err := op.ForceRelease(ctx, "stolen")
	if err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	if fr.Holder != cl.Token().Marker || fr.Epoch != cl.Token().Epoch {
		t.Errorf("force-release released %s@%d, want %s@%d", fr.Holder, fr.Epoch, cl.Token().Marker, cl.Token().Epoch)
	}
	cause := waitDone(t, cl.Context(), 10*time.Second)
	if !errors.Is(cause, client.ErrClaimLost) || !strings.Contains(cause.Error(), apitype.LostForceReleased) {
		t.Errorf("cause = %v, want ErrClaimLost naming %s", cause, apitype.LostForceReleased)
	}
	select {
	case f := <-frames:
		if f.Card != "stolen" || f.Epoch != cl.Token().Epoch || f.Reason != apitype.LostForceReleased || f.Seq <= 0 {
			t.Errorf("claim_lost frame = %+v", f)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("raw watcher saw no claim_lost frame")
	}
	// The late holder is fenced off.
	if _, err := cl.SetState(ctx, board.StateDone); !errors.Is(err, board.ErrClaimConflict) {
		t.Errorf("write after force-release: err %v, want ErrClaimConflict", err)
	}
	// Releasing a card that is already free is a no-op, as ReleaseOwned is.
	if err := cl.Release(ctx); err != nil {
		t.Errorf("release after force-release: %v, want nil (the card is free)", err)
	}
	// Another process takes the card: the superseded holder's late write is
	// a fence conflict naming the new holder, not a permission error.
	res := child(t, a.Path, "claim", "stolen", 0)
	if res.Marker == "" {
		t.Fatalf("claim by another process after the steal: %d %q (%s)", res.Status, res.Code, res.Error)
	}
	_, err = cl.SetState(ctx, board.StateDone)
	ce, ok := board.AsClaimConflict(err)
	if !ok || ce.Holder != res.Marker || ce.Epoch <= cl.Token().Epoch {
		t.Errorf("superseded write: err %v, want ErrClaimConflict naming the new holder at a higher epoch", err)
	}
}

func TestOtherProcessCannotTouchClaim(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{})
	a.Card(t, "mine")
	ctx := testCtx(t)
	c := &client.Client{Socket: a.Path}
	cl, err := c.Claim(ctx, "mine")
	if err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{"release", "state", "last-run", "gave-up", "start-run"} {
		t.Run(action, func(t *testing.T) {
			res := child(t, a.Path, action, "mine", cl.Token().Epoch)
			if res.Status != http.StatusForbidden || res.Code != string(apitype.CodeForbidden) {
				t.Errorf("%s by another process: %d %q (%s); want 403 forbidden", action, res.Status, res.Code, res.Error)
			}
		})
	}
	t.Run("claim", func(t *testing.T) {
		res := child(t, a.Path, "claim", "mine", 0)
		if res.Code != string(apitype.CodeClaimConflict) || res.Holder != cl.Token().Marker {
			t.Errorf("claim by another process: code %q holder %q; want claim_conflict held by %q", res.Code, res.Holder, cl.Token().Marker)
		}
	})
	card, err := a.Store.GetCard(ctx, board.GetCardParams{ID: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	if card.Token() != cl.Token() || card.State != board.StateReady || card.LastRunID != "" {
		t.Errorf("card after foreign attempts = token %+v state %q last_run %q; want untouched", card.Token(), card.State, card.LastRunID)
	}
	if cl.Context().Err() != nil {
		t.Errorf("owner's claim context ended: %v", context.Cause(cl.Context()))
	}
}

// shiftProber reads real identities, their start shifted once the test says
// so: to the server, every connection made afterwards comes from "a new
// process with the same pid". (TestReusedPIDIsRefusedTheDeadOwnersClaim
// does it with a real pid reuse.)
type shiftProber struct {
	real  pidprobe.Local
	shift atomic.Int64 // clock ticks
}

func (p *shiftProber) Identify(ctx context.Context, pid int) (pidprobe.Identity, error) {
	id, err := p.real.Identify(ctx, pid)
	if n := p.shift.Load(); n != 0 {
		id.StartTicks += n
		id.Inode = 0 // a new process would have its own; none is as good here
	}
	return id, err
}

func TestReusedPIDOwnsNothing(t *testing.T) {
	t.Parallel()
	prober := &shiftProber{}
	a := socketapitest.Start(t, socketapitest.Options{Prober: prober})
	a.Card(t, "reuse")
	ctx := testCtx(t)
	first := &client.Client{Socket: a.Path}
	cl, err := first.Claim(ctx, "reuse")
	if err != nil {
		t.Fatal(err)
	}
	prober.shift.Store(1) // one clock tick later: within any tolerance

	second := &client.Client{Socket: a.Path}
	if _, err := second.Claim(ctx, "reuse"); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("re-claim by a reused pid: err %v, want ErrForbidden", err)
	}
	for _, tc := range []struct {
		name, method, path, body string
	}{
		{"state", "PUT", "/v1/claims/reuse/state", `{"epoch":` + strconv.FormatInt(cl.Token().Epoch, 10) + `,"to":"done"}`},
		{"release", "DELETE", "/v1/claims/reuse?epoch=" + strconv.FormatInt(cl.Token().Epoch, 10), ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := rawDo(t, a.Path, tc.method, tc.path, tc.body)
			if status != http.StatusForbidden || !strings.Contains(body, "reused pid") {
				t.Errorf("%s from a reused pid: %d %s; want 403 naming the reused pid", tc.name, status, body)
			}
		})
	}
	card, err := a.Store.GetCard(ctx, board.GetCardParams{ID: "reuse"})
	if err != nil {
		t.Fatal(err)
	}
	if card.Token() != cl.Token() || card.State != board.StateReady {
		t.Errorf("card after reused-pid attempts: token %+v state %q; want untouched", card.Token(), card.State)
	}
}

// rawDo sends one request on a fresh connection.
func rawDo(t *testing.T, socket, method, path, body string) (int, string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	req, _ := http.NewRequest(method, "http://leasekeeper"+path, strings.NewReader(body))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, sb.String()
}

func TestTypedErrors(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{})
	ctx := testCtx(t)
	a.Card(t, "held")
	a.Card(t, "finished")
	if err := a.Store.SetState(ctx, board.MoveParams{Card: "finished", To: board.StateDone}); err != nil {
		t.Fatal(err)
	}
	card, err := a.Store.Claim(ctx, board.ClaimParams{Card: "held", Marker: "otherhost-999", Lease: time.Hour})
	otherTok := card.Token()
	if err != nil {
		t.Fatal(err)
	}
	c := &client.Client{Socket: a.Path}

	noOps := socketapitest.Start(t, socketapitest.Options{Operators: func() []uint32 { return nil }})
	outsider := &client.Client{Socket: noOps.Path}

	for _, tc := range []struct {
		name  string
		call  func() error
		wants []error
	}{
		{"claim missing card", func() error { _, err := c.Claim(ctx, "ghost"); return err }, []error{board.ErrNotFound}},
		{"claim held card", func() error { _, err := c.Claim(ctx, "held"); return err }, []error{board.ErrClaimConflict}},
		{"move out of a sink", func() error { _, err := c.MoveCard(ctx, "finished", board.StateReady); return err },
			[]error{board.ErrTerminalStateExit, board.ErrTransitionRejected}},
		{"duplicate card", func() error { _, err := c.CreateCard(ctx, board.CreateCardParams{ID: "held"}); return err },
			[]error{board.ErrAlreadyExists, board.ErrInvalidArgument}},
		{"unknown state", func() error { _, err := c.MoveCard(ctx, "held", "limbo"); return err }, []error{board.ErrInvalidArgument}},
		{"not an operator", func() error { _, err := outsider.CreateCard(ctx, board.CreateCardParams{ID: "x"}); return err }, []error{client.ErrForbidden}},
		{"no reaper", func() error { _, err := c.ReaperPass(ctx, true); return err }, []error{client.ErrUnavailable}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			for _, want := range tc.wants {
				if !errors.Is(err, want) {
					t.Errorf("err = %v; want errors.Is %v", err, want)
				}
			}
		})
	}
	_, err = c.Claim(ctx, "held")
	ce, ok := board.AsClaimConflict(err)
	if !ok || ce.Holder != "otherhost-999" || ce.Epoch != otherTok.Epoch || ce.Card != "held" {
		t.Errorf("AsClaimConflict(%v) = %+v, %v; want held by otherhost-999 at epoch %d", err, ce, ok, otherTok.Epoch)
	}
	if _, err := c.ClaimNext(ctx); !errors.Is(err, board.ErrNotFound) {
		// "held" is taken and "finished" is not in the pool.
		t.Errorf("ClaimNext on an empty pool: %v, want ErrNotFound", err)
	}
}

// TestClaimCancelsWhenAgentGoes pins the load-bearing half of the orphan
// proof: with the agent gone, the client stops by itself before the lease
// the store recorded runs out.
func TestClaimCancelsWhenAgentGoes(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{Lease: 1500 * time.Millisecond})
	a.Card(t, "orphan")
	ctx := testCtx(t)
	c := &client.Client{Socket: a.Path}
	cl, err := c.Claim(ctx, "orphan")
	if err != nil {
		t.Fatal(err)
	}
	a.Stop() // the agent exits: no more renewals, no more frames
	cause := waitDone(t, cl.Context(), 10*time.Second)
	stopped := time.Now()
	if !errors.Is(cause, client.ErrLeaseUntrusted) {
		t.Errorf("cause = %v, want ErrLeaseUntrusted", cause)
	}
	card, err := a.Store.GetCard(ctx, board.GetCardParams{ID: "orphan"})
	if err != nil {
		t.Fatal(err)
	}
	if card.Token() != cl.Token() {
		t.Fatalf("card token %+v changed under the test", card.Token())
	}
	if !stopped.Before(card.ClaimLeaseUntil) {
		t.Errorf("client stopped at %v, not before the stored lease end %v", stopped, card.ClaimLeaseUntil)
	}
}

func TestKeepaliveModePings(t *testing.T) {
	t.Parallel()
	lease := 1500 * time.Millisecond
	a := socketapitest.Start(t, socketapitest.Options{Lease: lease, Liveness: apitype.LivenessKeepalive})
	a.Card(t, "kept")
	ctx := testCtx(t)
	c := &client.Client{Socket: a.Path}
	cl, err := c.Claim(ctx, "kept")
	if err != nil {
		t.Fatal(err)
	}
	// Without pings the agent would drop the claim after its keepalive
	// window (two ticks, 2·lease/3); hold it across three whole leases.
	select {
	case <-cl.Context().Done():
		t.Fatalf("claim ended in keepalive mode while the client was alive: %v", context.Cause(cl.Context()))
	case <-time.After(3 * lease):
	}
	held := a.Loop.Held()
	if len(held) != 1 || held[0].Hold.Token != cl.Token() {
		t.Fatalf("heartbeat holds %+v, want the one claim %+v", held, cl.Token())
	}
	card, err := a.Store.GetCard(ctx, board.GetCardParams{ID: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	if card.Token() != cl.Token() || !card.ClaimLeaseUntil.After(time.Now()) {
		t.Errorf("card token %+v lease %v; want our live claim", card.Token(), card.ClaimLeaseUntil)
	}
	if err := cl.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestZeroValueClient(t *testing.T) {
	a := socketapitest.Start(t, socketapitest.Options{})
	t.Setenv(apitype.SocketEnv, a.Path)
	var c client.Client
	if got := c.SocketPath(); got != a.Path {
		t.Errorf("SocketPath = %q, want %q from %s", got, a.Path, apitype.SocketEnv)
	}
	st, err := c.Status(testCtx(t))
	if err != nil {
		t.Fatalf("Status through a zero Client: %v", err)
	}
	if st.Liveness != apitype.LivenessPID {
		t.Errorf("status liveness = %q, want pid", st.Liveness)
	}
}

func TestDefaultSocketPath(t *testing.T) {
	for _, tc := range []struct {
		name, xdg, want string
	}{
		{"runtime dir", "/run/user/1000", filepath.Join("/run/user/1000", "leasekeeper", "leasekeeper.sock")},
		{"no runtime dir", "", "leasekeeper.sock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("XDG_RUNTIME_DIR", tc.xdg)
			t.Setenv(apitype.SocketEnv, "")
			if got := apitype.DefaultSocketPath(); got != tc.want {
				t.Errorf("DefaultSocketPath() = %q, want %q", got, tc.want)
			}
			var c client.Client
			if got := c.SocketPath(); got != tc.want {
				t.Errorf("zero Client SocketPath() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestTrustMovedFollowsTheAgent: every word from the agent that moves the
// trusted deadline is announced on TrustMoved, so a process can hand each
// deadline on (`leasekeeper claim` gives it to its command's supervisor).
func TestTrustMovedFollowsTheAgent(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{Lease: 1500 * time.Millisecond, Liveness: apitype.LivenessKeepalive})
	a.Card(t, "moved")
	ctx := testCtx(t)
	c := &client.Client{Socket: a.Path}
	cl, err := c.Claim(ctx, "moved")
	if err != nil {
		t.Fatal(err)
	}
	first := cl.TrustedUntil()
	for moves := 0; moves < 3; {
		select {
		case <-cl.TrustMoved():
			if got := cl.TrustedUntil(); got.After(first) {
				first, moves = got, moves+1
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no move of the trusted deadline announced in 10s (%d so far)", moves)
		}
	}
	if err := cl.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
