package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// listedCounts counts the board as an operator lists it through the
// agent: cards per state (every state of the board definition, 0 for an
// empty one) and cards carrying a claim.
func listedCounts(t *testing.T, c *client.Client) (map[string]float64, float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := c.Board(ctx)
	if err != nil {
		t.Fatalf("board: %v", err)
	}
	cards, err := c.ListCards(ctx, board.ListCardsParams{})
	if err != nil {
		t.Fatalf("list cards: %v", err)
	}
	states := map[string]float64{}
	for _, s := range b.States {
		states[s.Name] = 0
	}
	var claimed float64
	for _, card := range cards {
		states[card.State]++
		if card.Claimed() {
			claimed++
		}
	}
	return states, claimed
}

// scrapedCounts reads the board-wide series of a scrape; ok is false while
// the agent has no count yet.
func scrapedCounts(fams map[string]*dto.MetricFamily) (states map[string]float64, claimed float64, ok bool) {
	f, ok := fams["leasekeeper_cards"]
	if !ok {
		return nil, 0, false
	}
	states = map[string]float64{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "state" {
				states[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	return states, value(fams, "leasekeeper_cards_claimed", nil), true
}

// waitBoardCounts polls the agent's metrics until its board-wide series
// agree with the board as listed (the test is the board's only writer, so
// the listing holds still), and returns that scrape.
func waitBoardCounts(t *testing.T, r *running, what string) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		wantStates, wantClaimed := listedCounts(t, r.client())
		fams := scrape(t, r.metrics)
		gotStates, gotClaimed, ok := scrapedCounts(fams)
		if ok && maps.Equal(gotStates, wantStates) && gotClaimed == wantClaimed {
			return fams
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the metrics never agreed with the board within 20s:\n got cards %v claimed %v (counted: %v)\nwant cards %v claimed %v",
				what, gotStates, gotClaimed, ok, wantStates, wantClaimed)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func runsFinished(fams map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, v := range runVerdicts {
		out[string(v)] = value(fams, "leasekeeper_runs_finished_total", map[string]string{"status": string(v)})
	}
	return out
}

func runDurations(t *testing.T, fams map[string]*dto.MetricFamily) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, v := range runVerdicts {
		m, ok := sample(fams, "leasekeeper_run_duration_seconds", map[string]string{"status": string(v)})
		if !ok {
			t.Fatalf("no leasekeeper_run_duration_seconds series for status %s", v)
		}
		out[string(v)] = m.GetHistogram().GetSampleCount()
	}
	return out
}

// TestQueueMetricsMatchTheBoard drives a real agent (bbolt file, Unix
// socket, its own timers) through creations, moves, claims, runs and
// their verdicts, a state rename and a state delete, and after each step
// compares the scraped board-wide series with the board as listed through
// the agent; then restarts the agent on the same file, whose first count
// must be exact at once. The run series count each verdict written
// through the agent once, whichever verb wrote it.
func TestQueueMetricsMatchTheBoard(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "board.db")
	opts := runOpts{
		metrics:         true,
		dbPath:          dbPath,
		boardCountEvery: 20 * time.Millisecond,
		seed: func(t *testing.T, s *boltstore.Store) {
			for _, nc := range []board.CreateCardParams{
				{ID: "a", State: board.StateBacklog},
				{ID: "b"}, {ID: "c"}, {ID: "e"},
				{ID: "x", State: board.StateBacklog},
			} {
				if _, err := s.CreateCard(context.Background(), nc); err != nil {
					t.Fatal(err)
				}
			}
		},
	}
	r := startRun(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := r.client()

	// The initial load: the cards seeded before the agent started.
	fams := waitBoardCounts(t, r, "after the start")
	if got := value(fams, "leasekeeper_cards", map[string]string{"state": board.StateReady}); got != 3 {
		t.Fatalf("ready cards = %v, want the 3 seeded", got)
	}
	if got := value(fams, "leasekeeper_claim_age_seconds", nil); got != 0 {
		t.Errorf("claim age with nothing held = %v, want 0", got)
	}

	if _, err := c.CreateCard(ctx, board.CreateCardParams{ID: "d"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.MoveCard(ctx, "a", board.StateReady); err != nil {
		t.Fatal(err)
	}
	waitBoardCounts(t, r, "after a creation and a move")

	held, err := c.Claim(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	// b's claim ages while it is the only one: the age is b's.
	deadline := time.Now().Add(20 * time.Second)
	for value(scrape(t, r.metrics), "leasekeeper_claim_age_seconds", nil) < 0.25 {
		if time.Now().After(deadline) {
			t.Fatal("the claim age of b never reached 0.25s within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	started, err := c.Start(ctx, "c", client.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	failing, err := c.Start(ctx, "e", client.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fine, err := c.Claim(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	fams = waitBoardCounts(t, r, "after claims and starts")
	if got := value(fams, "leasekeeper_claims_held", nil); got != 4 {
		t.Errorf("claims held = %v, want 4", got)
	}
	if got := value(fams, "leasekeeper_cards_claimed", nil); got != 4 {
		t.Errorf("cards claimed = %v, want 4", got)
	}
	// The oldest claim is b's, older by 0.25s than the others: the age is
	// measured from its claimed_at.
	b, err := c.GetCard(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	age := value(scrape(t, r.metrics), "leasekeeper_claim_age_seconds", nil)
	after := time.Now()
	if lo, hi := before.Sub(b.ClaimedAt).Seconds()-0.001, after.Sub(b.ClaimedAt).Seconds()+0.001; age < lo || age > hi {
		t.Errorf("claim age = %v, want between %v and %v (since b's claimed_at %v)", age, lo, hi, b.ClaimedAt)
	}

	// Verdicts: a Finish each way, and a fine-grained run given its
	// verdict by an update, then updated again (not a second verdict).
	if _, err := started.Finish(ctx, client.Verdict{Status: board.RunFinished}); err != nil {
		t.Fatal(err)
	}
	if _, err := failing.Finish(ctx, client.Verdict{Status: board.RunFailed, FailureCode: "BOOM"}); err != nil {
		t.Fatal(err)
	}
	run, err := fine.StartRun(ctx, client.RunSpec{ID: "run-d"})
	if err != nil {
		t.Fatal(err)
	}
	cancelled := board.RunCancelled
	if _, err := fine.UpdateRun(ctx, run.ID, apitype.UpdateRunRequest{Status: &cancelled}); err != nil {
		t.Fatal(err)
	}
	code := "AGAIN"
	if _, err := fine.UpdateRun(ctx, run.ID, apitype.UpdateRunRequest{Status: &cancelled, FailureCode: &code}); err != nil {
		t.Fatal(err)
	}
	if err := fine.Release(ctx); err != nil {
		t.Fatal(err)
	}
	fams = waitBoardCounts(t, r, "after the verdicts")
	if got, want := runsFinished(fams), map[string]float64{"finished": 1, "failed": 1, "failed_resumable": 0, "cancelled": 1}; !maps.Equal(got, want) {
		t.Errorf("runs finished = %v, want %v", got, want)
	}
	if got, want := runDurations(t, fams), map[string]uint64{"finished": 1, "failed": 1, "failed_resumable": 0, "cancelled": 1}; !maps.Equal(got, want) {
		t.Errorf("run durations observed = %v, want %v", got, want)
	}

	// Board administration moves cards without a person's move event per
	// card: a rename relabels the series, a delete folds one into another.
	if _, err := c.MoveCard(ctx, "x", board.StateBlocked); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RenameState(ctx, board.StateBacklog, "later"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteState(ctx, board.StateBlocked, board.StateCancelled); err != nil {
		t.Fatal(err)
	}
	fams = waitBoardCounts(t, r, "after a state rename and a state delete")
	for _, gone := range []string{board.StateBacklog, board.StateBlocked} {
		if _, ok := sample(fams, "leasekeeper_cards", map[string]string{"state": gone}); ok {
			t.Errorf("a series for the removed state %q is still served", gone)
		}
	}

	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	fams = waitBoardCounts(t, r, "after the last release")
	if got := value(fams, "leasekeeper_claim_age_seconds", nil); got != 0 {
		t.Errorf("claim age with nothing held = %v, want 0", got)
	}

	// A restart counts the board afresh: the first count served is exact,
	// with no event in between to lean on.
	wantStates, wantClaimed := listedCounts(t, c)
	if err := r.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	opts.seed = nil
	r2 := startRun(t, opts)
	deadline = time.Now().Add(20 * time.Second)
	for {
		gotStates, gotClaimed, ok := scrapedCounts(scrape(t, r2.metrics))
		if ok {
			if !maps.Equal(gotStates, wantStates) || gotClaimed != wantClaimed {
				t.Fatalf("first count after a restart: cards %v claimed %v, want %v claimed %v", gotStates, gotClaimed, wantStates, wantClaimed)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the restarted agent served no board count within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClaimAgesTakeTheOldestHeld pins the claim-age bookkeeping: the age
// is the oldest held claim's, a record survives until the heartbeat no
// longer holds its claim past the grace, and a retry keeps the first
// record.
func TestClaimAgesTakeTheOldestHeld(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	hold := func(card string, epoch int64) board.Hold {
		return board.Hold{Card: card, Token: board.ClaimToken{Marker: "h-1", Epoch: epoch}}
	}
	held := func(hs ...board.Hold) []heartbeat.Claim {
		var out []heartbeat.Claim
		for _, h := range hs {
			out = append(out, heartbeat.Claim{Hold: h})
		}
		return out
	}
	c := newClaimAges()
	c.note(hold("a", 1), now.Add(-time.Hour))
	c.note(hold("b", 1), now.Add(-time.Minute))
	c.note(hold("b", 1), now) // a retry of the same grant
	if got, want := c.oldest(held(hold("a", 1), hold("b", 1)), now), time.Hour; got != want {
		t.Errorf("oldest of a and b = %v, want %v", got, want)
	}
	// a released: b is the oldest; a's record is young, so kept (its
	// heartbeat add may be on its way).
	if got, want := c.oldest(held(hold("b", 1)), now), time.Minute; got != want {
		t.Errorf("oldest of b = %v, want %v", got, want)
	}
	// A new epoch of a is a new claim, not the old record.
	if got := c.oldest(held(hold("a", 2)), now); got != 0 {
		t.Errorf("age of an unrecorded claim = %v, want 0 (none recorded)", got)
	}
	if got := c.oldest(nil, now); got != 0 {
		t.Errorf("age with nothing held = %v", got)
	}
	// Past the grace, records of claims held no longer are forgotten.
	c.mu.Lock()
	for h, n := range c.since {
		n.noted = n.noted.Add(-2 * claimNoteGrace)
		c.since[h] = n
	}
	c.mu.Unlock()
	c.oldest(held(hold("b", 1)), now)
	if got := c.size(); got != 1 {
		t.Errorf("records after a prune = %d, want 1 (b)", got)
	}
	// A clock behind the store's never makes a negative age.
	if got := c.oldest(held(hold("b", 1)), now.Add(-time.Hour)); got != 0 {
		t.Errorf("age from a clock behind claimed_at = %v, want 0", got)
	}
}

// TestBoardCounterListsOnlyWhenTheBoardMayHaveChanged pins the cadence
// rule of the board-wide counts (DESIGN.md#queue-depth): a look lists the
// board when the event log moved, when the board's states changed, or when
// the counts reached their maximum age, and at no other time; a failed
// listing keeps the last counts.
func TestBoardCounterListsOnlyWhenTheBoardMayHaveChanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	def := board.DefaultBoard(true)
	cards := []board.Card{{ID: "a", State: board.StateReady}, {ID: "b", State: board.StateReady, Claim: "h-1"}}
	var head int64 = 7
	var lists int
	var listErr error
	c := &boardCounter{
		list: func(context.Context) ([]board.Card, error) {
			lists++
			if listErr != nil {
				return nil, listErr
			}
			return cards, nil
		},
		boards: func(context.Context) (board.Board, error) { return def, nil },
		head:   func() int64 { return head },
		every:  time.Second,
		maxAge: time.Minute,
		now:    func() time.Time { return now },
	}
	look := func(what string, wantLists int) {
		t.Helper()
		if err := c.look(ctx); err != nil && listErr == nil {
			t.Fatalf("%s: %v", what, err)
		}
		if lists != wantLists {
			t.Fatalf("%s: %d listings, want %d", what, lists, wantLists)
		}
	}
	counts := func() (map[string]int, int) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.last.cards, c.last.claimed
	}
	look("the first look", 1)
	if got, claimed := counts(); got[board.StateReady] != 2 || claimed != 1 {
		t.Fatalf("counts %v claimed %d, want 2 ready, 1 claimed", got, claimed)
	}
	now = now.Add(30 * time.Second)
	look("a quiet log", 1)
	head = 8
	cards = append(cards, board.Card{ID: "c", State: board.StateBacklog})
	look("the log moved", 2)
	if got, _ := counts(); got[board.StateBacklog] != 1 {
		t.Fatalf("counts %v after the log moved, want the new backlog card", got)
	}
	def.States = append(def.States, board.State{Name: "later"})
	look("a state added", 3)
	look("nothing changed", 3)
	now = now.Add(time.Minute)
	look("the counts reached their maximum age", 4)
	head = 9
	listErr = errors.New("store down")
	look("a failed listing", 5)
	if got, claimed := counts(); got[board.StateBacklog] != 1 || claimed != 1 {
		t.Fatalf("a failed listing changed the counts: %v claimed %d", got, claimed)
	}
	listErr = nil
	look("the store back", 6)
}

// TestQueueMetricsFollowAFleetsWrites runs a real agent on a MongoDB-wire
// server and writes through another store of the same fleet, as another
// agent would: the cards it creates, moves and claims reach this agent's
// board-wide series through the event log, and its first count covers
// what the fleet wrote before it started.
func TestQueueMetricsFollowAFleetsWrites(t *testing.T) {
	t.Parallel()
	uri, db := mongotest.URI(t), mongotest.Database(t)
	other := openMongoSpec(t, uri, db)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, nc := range []board.CreateCardParams{{ID: "a"}, {ID: "b", State: board.StateBacklog}} {
		if _, err := other.CreateCard(ctx, nc); err != nil {
			t.Fatal(err)
		}
	}
	r := startRun(t, runOpts{
		metrics:         true,
		store:           fmt.Sprintf("{backend: mongo, uri: %q, database: %s}", uri, db),
		boardCountEvery: 20 * time.Millisecond,
	})
	fams := waitBoardCounts(t, r, "the first count")
	if got := value(fams, "leasekeeper_cards", map[string]string{"state": board.StateBacklog}); got != 1 {
		t.Fatalf("backlog cards = %v, want the one the fleet created before the start", got)
	}

	elsewhere := board.WorkerMarker("elsewhere", 4242)
	if _, err := other.CreateCard(ctx, board.CreateCardParams{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	if err := other.SetState(ctx, board.MoveParams{Card: "b", To: board.StateReady, Actor: "operator"}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Claim(ctx, board.ClaimParams{Card: "a", Marker: elsewhere, Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	fams = waitBoardCounts(t, r, "after the fleet's writes")
	if got := value(fams, "leasekeeper_cards_claimed", nil); got != 1 {
		t.Errorf("cards claimed = %v, want the other host's claim", got)
	}
	if got := value(fams, "leasekeeper_claims_held", nil); got != 0 {
		t.Errorf("claims held by this agent = %v, want 0: the claim is another host's", got)
	}
	if err := other.Release(ctx, board.ReleaseParams{Card: "a", Marker: elsewhere, Actor: "operator"}); err != nil {
		t.Fatal(err)
	}
	waitBoardCounts(t, r, "after the fleet's release")
}

// TestOrphanVerdictCountsAsARunOutcome: the watchdog's verdict on a run
// whose owner died (PROCESS_ORPHANED, written through the agent's store)
// is a run outcome of the agent that wrote it, counted once.
func TestOrphanVerdictCountsAsARunOutcome(t *testing.T) {
	t.Parallel()
	host, err := pidprobe.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	r := startRun(t, runOpts{
		yaml:    "reaper: {enabled: true}\n",
		metrics: true,
		seed: func(t *testing.T, s *boltstore.Store) {
			ctx := context.Background()
			if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "c"}); err != nil {
				t.Fatal(err)
			}
			dead := deadPID(t)
			if _, err := s.Start(ctx, board.StartParams{Card: "c", Marker: board.WorkerMarker(host, dead), Lease: time.Hour,
				Run: board.Run{ID: "run-1", Host: host, PID: dead}}); err != nil {
				t.Fatal(err)
			}
		},
	})
	r.waitStatus(t, 20*time.Second, "the startup reaper pass", func(st apitype.Status) bool { return st.Reaper.LastPass != nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	run, err := r.client().GetRun(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != board.RunFailed || run.FailureCode != board.FailureProcessOrphaned {
		t.Fatalf("run after the pass: %s %s, want failed PROCESS_ORPHANED", run.Status, run.FailureCode)
	}
	fams := scrape(t, r.metrics)
	if got, want := runsFinished(fams), map[string]float64{"finished": 0, "failed": 1, "failed_resumable": 0, "cancelled": 0}; !maps.Equal(got, want) {
		t.Errorf("runs finished = %v, want %v", got, want)
	}
	if got := runDurations(t, fams)["failed"]; got != 1 {
		t.Errorf("failed run durations observed %d times, want 1", got)
	}
	// The orphaned run is retryable: the pass returned the card to the pool
	// for another attempt (DESIGN.md#retries), and counted it.
	if got := value(fams, "leasekeeper_retries_total", map[string]string{"outcome": "retried"}); got != 1 {
		t.Errorf("retries retried = %v, want 1", got)
	}
	if got := value(fams, "leasekeeper_retries_total", map[string]string{"outcome": "spent"}); got != 0 {
		t.Errorf("retries spent = %v, want 0", got)
	}
}

// TestBoardCounterCountsAndFallsBackToListing: the counter asks the store
// to count; a store that cannot (a plugin built before CountCards answers
// it unsupported) is listed instead, from that answer on, so the counts
// stay exact and the refused call is made once.
func TestBoardCounterCountsAndFallsBackToListing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	def := board.DefaultBoard(true)
	var counts, lists int
	countErr := error(nil)
	c := &boardCounter{
		count: func(context.Context) (board.CardCounts, error) {
			counts++
			if countErr != nil {
				return board.CardCounts{}, countErr
			}
			return board.CardCounts{States: map[string]int{board.StateReady: 3}, Claimed: 1}, nil
		},
		list: func(context.Context) ([]board.Card, error) {
			lists++
			return []board.Card{{ID: "a", State: board.StateBacklog, Claim: "h-1"}}, nil
		},
		boards: func(context.Context) (board.Board, error) { return def, nil },
		every:  time.Second,
		maxAge: time.Minute,
		now:    time.Now,
		log:    slog.New(slog.DiscardHandler),
	}
	if err := c.look(ctx); err != nil {
		t.Fatal(err)
	}
	if counts != 1 || lists != 0 || c.last.cards[board.StateReady] != 3 || c.last.claimed != 1 {
		t.Fatalf("with a store that counts: %d counts, %d listings, counts %v claimed %d; want the store's count", counts, lists, c.last.cards, c.last.claimed)
	}
	countErr = fmt.Errorf("store plugin: CountCards: not implemented by this plugin: %w", errors.ErrUnsupported)
	for range 2 {
		if err := c.look(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if counts != 2 || lists != 2 || c.last.cards[board.StateBacklog] != 1 || c.last.claimed != 1 {
		t.Fatalf("with a store that cannot count: %d counts, %d listings, counts %v claimed %d; want one refused count, then listings", counts, lists, c.last.cards, c.last.claimed)
	}
	countErr = errors.New("store down")
	c.mu.Lock()
	c.listOnly = false
	c.mu.Unlock()
	if err := c.look(ctx); !errors.Is(err, countErr) {
		t.Fatalf("a store that fails to count: err %v, want its error (no listing instead)", err)
	}
}
