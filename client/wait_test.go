package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
	"github.com/leasekeeper/leasekeeper/socketapi/socketapitest"
)

// Waiting (DESIGN.md#waiting): a real socket, a real bbolt store. The
// backstop is set to an hour in every test, so what wakes a waiter here is
// the event stream and nothing else.

const noBackstop = time.Hour

// holdElsewhere claims card for a marker that is not this process's.
func holdElsewhere(t *testing.T, a *socketapitest.Agent, card string) {
	t.Helper()
	if _, err := a.Store.Claim(context.Background(), board.ClaimParams{Card: card, Marker: "otherhost-4242", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
}

func releaseElsewhere(t *testing.T, a *socketapitest.Agent, card string) {
	t.Helper()
	if err := a.Store.Release(context.Background(), board.ReleaseParams{Card: card, Marker: "otherhost-4242", Actor: "test"}); err != nil {
		t.Fatal(err)
	}
}

type claimResult struct {
	cl  *client.Claim
	err error
}

// TestEventsHeadIsTheLastSeq: the head is the last event's number, and a
// follow after it delivers the next write's events and none before.
func TestEventsHeadIsTheLastSeq(t *testing.T) {
	t.Parallel()
	a, c, ctx := lifecycleEnv(t)
	if head, err := c.EventsHead(ctx); err != nil || head != 0 {
		t.Fatalf("head of an empty log = %d, %v; want 0", head, err)
	}
	a.Card(t, "one")
	a.Card(t, "two")
	head, err := c.EventsHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := lastSeq(t, a); head != want {
		t.Fatalf("head = %d, want the last event's seq %d", head, want)
	}
	a.Card(t, "three")
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var got []board.Event
	_ = c.FollowEvents(fctx, head, func(ev board.Event) error {
		got = append(got, ev)
		cancel()
		return nil
	})
	if len(got) != 1 || got[0].Card != "three" || got[0].Seq <= head {
		t.Fatalf("follow after the head delivered %+v, want only the event of card three", got)
	}
	if again, err := c.EventsHead(ctx); err != nil || again != got[0].Seq {
		t.Fatalf("head after one more write = %d, %v; want %d", again, err, got[0].Seq)
	}
}

// TestClaimWaitTakesTheCardWhenItsHolderReleases: a waiter on a held card
// does not have it while it is held, and gets it once the holder lets go.
func TestClaimWaitTakesTheCardWhenItsHolderReleases(t *testing.T) {
	t.Parallel()
	a, c, ctx := lifecycleEnv(t, "job")
	holdElsewhere(t, a, "job")
	tried := make(chan struct{})
	client.SetWaitHooks(c, func() { close(tried) }, noBackstop)
	res := make(chan claimResult, 1)
	go func() {
		cl, err := c.Start(ctx, "job", client.StartOptions{Wait: true})
		res <- claimResult{cl, err}
	}()
	<-tried // refused once: the waiter is waiting
	select {
	case r := <-res:
		t.Fatalf("the waiter returned while the card was held: %v", r.err)
	default:
	}
	if cd := getCard(t, a, "job"); cd.Claim != "otherhost-4242" {
		t.Fatalf("card held by %q while the holder had not released, want otherhost-4242", cd.Claim)
	}
	releaseElsewhere(t, a, "job")
	r := <-res
	if r.err != nil {
		t.Fatalf("waiting Start: %v", r.err)
	}
	defer r.cl.Release(context.Background())
	if cd := getCard(t, a, "job"); cd.Claim != r.cl.Token().Marker || r.cl.Run().ID == "" {
		t.Fatalf("card claimed by %q (run %q), want the waiter %q with a run", cd.Claim, r.cl.Run().ID, r.cl.Token().Marker)
	}
}

// TestClaimWaitSeesAReleaseBetweenItsTryAndItsFollow pins the order of a
// wait: the head is read before the try, so a release that lands after the
// try refused and before the follow starts is still delivered. Read after
// the try, the head would already be past the release and, with no
// backstop, the waiter would sleep until its context ends.
func TestClaimWaitSeesAReleaseBetweenItsTryAndItsFollow(t *testing.T) {
	t.Parallel()
	a, c, ctx := lifecycleEnv(t, "job")
	holdElsewhere(t, a, "job")
	client.SetWaitHooks(c, func() { releaseElsewhere(t, a, "job") }, noBackstop)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl, err := c.ClaimWait(wctx, "job")
	if err != nil {
		t.Fatalf("ClaimWait missed the release made between its try and its follow: %v", err)
	}
	cl.Release(context.Background())
}

// TestClaimNextWaitIsWokenByACardCreatedWithItsLabel: a routed waiter
// passes over a card without its label and takes the one created with it.
func TestClaimNextWaitIsWokenByACardCreatedWithItsLabel(t *testing.T) {
	t.Parallel()
	a, c, ctx := lifecycleEnv(t, "plain")
	tried := make(chan struct{})
	client.SetWaitHooks(c, func() { close(tried) }, noBackstop)
	res := make(chan claimResult, 1)
	go func() {
		cl, err := c.ClaimNextWait(ctx, "gpu")
		res <- claimResult{cl, err}
	}()
	<-tried
	if _, err := a.Store.CreateCard(ctx, board.CreateCardParams{ID: "cpu-job", Labels: []string{"cpu"}, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Store.CreateCard(ctx, board.CreateCardParams{ID: "gpu-job", Labels: []string{"gpu"}, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil {
		t.Fatalf("ClaimNextWait: %v", r.err)
	}
	defer r.cl.Release(context.Background())
	if id := r.cl.Card().ID; id != "gpu-job" {
		t.Fatalf("the gpu waiter took %s, want gpu-job", id)
	}
	for _, id := range []string{"plain", "cpu-job"} {
		if cd := getCard(t, a, id); cd.Claim != "" {
			t.Errorf("card %s claimed by %q, want it left alone", id, cd.Claim)
		}
	}
}

// TestClaimWaitTimesOutWithTheLastRefusal: a wait its context ends is a
// *WaitError naming the deadline and the refusal, and claims nothing.
func TestClaimWaitTimesOutWithTheLastRefusal(t *testing.T) {
	t.Parallel()
	a, c, ctx := lifecycleEnv(t, "job")
	holdElsewhere(t, a, "job")
	client.SetWaitHooks(c, nil, noBackstop)
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := c.ClaimWait(wctx, "job")
	var we *client.WaitError
	if !errors.As(err, &we) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, board.ErrClaimConflict) {
		t.Fatalf("ClaimWait past its deadline: %v, want a WaitError of the deadline and the claim conflict", err)
	}
	if cd := getCard(t, a, "job"); cd.Claim != "otherhost-4242" {
		t.Fatalf("card held by %q after the timed-out wait, want otherhost-4242", cd.Claim)
	}
	// A refusal that waiting cannot mend is returned at once.
	if _, err := c.ClaimWait(ctx, "no-such-card"); !errors.Is(err, board.ErrNotFound) {
		t.Fatalf("ClaimWait on a card that does not exist: %v, want ErrNotFound at once", err)
	}
}

// TestWaitCardReturnsWhenTheCardIsDone: at once for a card already done,
// and on the event of another writer's move for one that is not.
func TestWaitCardReturnsWhenTheCardIsDone(t *testing.T) {
	t.Parallel()
	a, c, ctx := lifecycleEnv(t, "early", "late")
	client.SetWaitHooks(c, nil, noBackstop)
	if err := a.Store.SetState(ctx, board.MoveParams{Card: "early", To: board.StateDone, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	isDone := func(cd board.Card) (bool, error) { return cd.State == board.StateDone, nil }
	if cd, err := c.WaitCard(ctx, "early", isDone); err != nil || cd.State != board.StateDone {
		t.Fatalf("WaitCard on a done card: %s, %v", cd.State, err)
	}

	tried := make(chan struct{})
	client.SetWaitHooks(c, func() { close(tried) }, noBackstop)
	type res struct {
		cd  board.Card
		err error
	}
	done := make(chan res, 1)
	go func() {
		cd, err := c.WaitCard(ctx, "late", isDone)
		done <- res{cd, err}
	}()
	<-tried
	if err := a.Store.SetState(ctx, board.MoveParams{Card: "late", To: board.StateDone, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.cd.State != board.StateDone {
		t.Fatalf("WaitCard: %s, %v; want done", r.cd.State, r.err)
	}
	if _, err := c.WaitCard(ctx, "no-such-card", isDone); !errors.Is(err, board.ErrNotFound) {
		t.Fatalf("WaitCard on a card that does not exist: %v, want ErrNotFound", err)
	}
}

// TestStartWaitTakesACardWhenItsLastBlockerCompletes: a card waiting on its
// blockers is waited for, and the promotion its blocker's completion
// writes (an event of the waited card) wakes the waiter.
func TestStartWaitTakesACardWhenItsLastBlockerCompletes(t *testing.T) {
	t.Parallel()
	a, c, ctx := lifecycleEnv(t, "blocker")
	if _, err := a.Store.CreateCard(ctx, board.CreateCardParams{ID: "gated", DependsOn: []string{"blocker"}, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	tried := make(chan struct{})
	client.SetWaitHooks(c, func() { close(tried) }, noBackstop)
	res := make(chan claimResult, 1)
	go func() {
		cl, err := c.Start(ctx, "gated", client.StartOptions{Wait: true})
		res <- claimResult{cl, err}
	}()
	<-tried
	select {
	case r := <-res:
		t.Fatalf("the waiter returned while the blocker was open: %v", r.err)
	default:
	}
	if err := a.Store.SetState(ctx, board.MoveParams{Card: "blocker", To: board.StateDone, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil {
		t.Fatalf("waiting Start on a gated card: %v", r.err)
	}
	defer r.cl.Release(context.Background())
	if cd := getCard(t, a, "gated"); cd.Claim != r.cl.Token().Marker || cd.State != board.StateInProgress {
		t.Fatalf("gated in %s claimed by %q, want in progress under the waiter", cd.State, cd.Claim)
	}
}

// TestClaimWaitEndedBeforeItBeganStillReportsTheRefusal: a wait whose
// context is already over still reads the head and tries once, each to
// its answer, so it reports what it would have waited on (a timeout that
// ran out before the first try must not turn into a bare context error).
func TestClaimWaitEndedBeforeItBeganStillReportsTheRefusal(t *testing.T) {
	t.Parallel()
	a, c, _ := lifecycleEnv(t, "job")
	holdElsewhere(t, a, "job")
	client.SetWaitHooks(c, nil, noBackstop)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.ClaimWait(ctx, "job")
	var we *client.WaitError
	if !errors.As(err, &we) || !errors.Is(err, context.Canceled) || !errors.Is(err, board.ErrClaimConflict) {
		t.Fatalf("ClaimWait on an ended context: %v, want a WaitError of the cancellation and the claim conflict", err)
	}
}

// TestClaimWaitOutlivesAnAgentRestart: the agent goes away while a waiter
// waits, the holder lets go while it is down, and a new agent serves the
// same board: the waiter reconnects, resumes the log where it left it, and
// takes the card.
func TestClaimWaitOutlivesAnAgentRestart(t *testing.T) {
	t.Parallel()
	a, c, ctx := lifecycleEnv(t, "job")
	holdElsewhere(t, a, "job")
	tried := make(chan struct{})
	client.SetWaitHooks(c, func() { close(tried) }, noBackstop)
	res := make(chan claimResult, 1)
	go func() {
		cl, err := c.ClaimWait(ctx, "job")
		res <- claimResult{cl, err}
	}()
	<-tried
	a.Stop()
	releaseElsewhere(t, a, "job")
	socketapitest.Start(t, socketapitest.Options{Path: a.Path, Store: a.Store})
	r := <-res
	if r.err != nil {
		t.Fatalf("ClaimWait across an agent restart: %v", r.err)
	}
	defer r.cl.Release(context.Background())
	if cd := getCard(t, a, "job"); cd.Claim != r.cl.Token().Marker {
		t.Fatalf("card held by %q, want the waiter %q", cd.Claim, r.cl.Token().Marker)
	}
}

// refusingProxy stands between a client and a real agent and answers the
// first `refuse` follows of the event log with a refusal, as an agent does
// for a position it no longer serves (the log pruned past it); everything
// else passes through. It runs in the test process, so the agent sees the
// same peer as the client.
func refusingProxy(t *testing.T, agentSocket string, refuse int32) (path string, refused *atomic.Int32) {
	t.Helper()
	dir, err := os.MkdirTemp("", "lkr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path = filepath.Join(dir, "proxy.sock")
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", agentSocket)
	}
	target := &url.URL{Scheme: "http", Host: "leasekeeper"}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }, Transport: &http.Transport{DialContext: dial}}
	refused = new(atomic.Int32)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/events" && r.URL.Query().Get("follow") == "true" && refused.Load() < refuse {
			refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error": "position no longer served", "code": "invalid_argument"}`))
			return
		}
		rp.ServeHTTP(w, r)
	})
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return path, refused
}

// TestClaimWaitStartsOverFromAFreshHeadWhenItsFollowIsRefused: a follow
// the agent refuses once is started again from a fresh head, with a try
// after it, and the waiter still takes the card when its holder lets go;
// refused again with no event between, the wait ends with the refusal
// rather than spin.
func TestClaimWaitStartsOverFromAFreshHeadWhenItsFollowIsRefused(t *testing.T) {
	t.Parallel()
	a, _, ctx := lifecycleEnv(t, "job", "other")
	holdElsewhere(t, a, "job")
	path, refused := refusingProxy(t, a.Path, 1)
	c := &client.Client{Socket: path}
	client.SetWaitHooks(c, nil, noBackstop)
	res := make(chan claimResult, 1)
	go func() {
		cl, err := c.ClaimWait(ctx, "job")
		res <- claimResult{cl, err}
	}()
	agentproc.WaitFor(t, 10*time.Second, "the waiter's follow to be refused", func() bool { return refused.Load() == 1 })
	select {
	case r := <-res:
		t.Fatalf("the waiter returned on a refused follow: %v", r.err)
	default:
	}
	releaseElsewhere(t, a, "job")
	r := <-res
	if r.err != nil {
		t.Fatalf("ClaimWait after a refused follow: %v", r.err)
	}
	r.cl.Release(context.Background())

	holdElsewhere(t, a, "other")
	always, _ := refusingProxy(t, a.Path, 1<<30)
	c2 := &client.Client{Socket: always}
	client.SetWaitHooks(c2, nil, noBackstop)
	if _, err := c2.ClaimWait(ctx, "other"); !errors.Is(err, board.ErrInvalidArgument) {
		t.Fatalf("ClaimWait whose every follow is refused: %v, want the refusal", err)
	}
}

// TestClaimWaitWaitsOutARetryBackoff: a card backing off after a retryable
// failure (DESIGN.md#retries) is refused by id until its retry_at, and no
// event marks that time. The waiter reads it from the card and tries again
// then, with the backstop an hour away.
func TestClaimWaitWaitsOutARetryBackoff(t *testing.T) {
	t.Parallel()
	a, c, ctx := lifecycleEnv(t)
	const backoff = 300 * time.Millisecond
	if _, err := a.Store.CreateCard(ctx, board.CreateCardParams{ID: "flaky", Actor: "test",
		Retry: &board.RetryPolicy{MaxAttempts: 3, Backoff: backoff, BackoffMax: backoff}}); err != nil {
		t.Fatal(err)
	}
	st, err := a.Store.Start(ctx, board.StartParams{Card: "flaky", Marker: "otherhost-4242", Lease: time.Minute,
		Run: board.Run{ID: "r1", Host: "otherhost", PID: 4242}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := a.Store.Finish(ctx, board.FinishParams{Card: "flaky", Token: st.Token, RunID: "r1",
		Status: board.RunFailed, FailureCode: "SIGNAL_9", Retryable: true})
	if err != nil {
		t.Fatal(err)
	}
	if f.Card.RetryAt.IsZero() || f.Card.Claim != "" {
		t.Fatalf("after a retryable failure the card is %+v, want it free and backing off", f.Card)
	}
	tried := make(chan struct{})
	client.SetWaitHooks(c, func() { close(tried) }, noBackstop)
	res := make(chan claimResult, 1)
	go func() {
		cl, err := c.ClaimWait(ctx, "flaky")
		res <- claimResult{cl, err}
	}()
	select {
	case <-tried: // refused once, backing off: the waiter waits
	case r := <-res:
		t.Fatalf("ClaimWait of a card backing off returned without waiting: %v", r.err)
	}
	r := <-res
	if r.err != nil {
		t.Fatalf("ClaimWait of a card backing off: %v", r.err)
	}
	defer r.cl.Release(context.Background())
	if now := time.Now(); now.Before(f.Card.RetryAt) {
		t.Errorf("claimed at %v, before the card's retry_at %v", now, f.Card.RetryAt)
	}
}

// TestWaitableIsTheOneListOfWhatAWaitWaitsOut: the refusals a wait waits
// out, by id and for the next card, which the client's wait and the CLI's
// `claim --wait` both ask (DESIGN.md#waiting).
func TestWaitableIsTheOneListOfWhatAWaitWaitsOut(t *testing.T) {
	t.Parallel()
	held := board.Conflict("c1", "host-7", 3)
	blocked := fmt.Errorf("card c1: %w", board.ErrWaitingOnBlockers)
	none := fmt.Errorf("no card: %w", board.ErrNotFound)
	sink := fmt.Errorf("card c1: %w", board.ErrTerminalStateExit)
	for _, tc := range []struct {
		next bool
		err  error
		want bool
	}{
		{false, held, true}, {false, blocked, true}, {false, none, false}, {false, sink, false},
		{true, none, true}, {true, held, true}, {true, blocked, false}, {true, sink, false},
	} {
		if got := client.Waitable(tc.next, tc.err); got != tc.want {
			t.Errorf("Waitable(next %v, %v) = %v, want %v", tc.next, tc.err, got, tc.want)
		}
	}
}
