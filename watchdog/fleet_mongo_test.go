package watchdog_test

// Fleet tests of the watchdog against the real MongoDB twin: several agents,
// each with its own store client on one database of the MongoDB-wire test
// server (internal/mongotest), racing real passes. The bbolt scenarios in
// reaper_test.go pin the decisions one card at a time; these pin what only a
// shared database can show — one winner per card across agents, the
// un-leased sweep's query, and the fleet-only dispositions (DESIGN.md#twins).
//
// The fleet twin stamps leases and claimed_at from the SERVER's clock, which
// a test cannot move. Expiry is therefore reached without moving the server clock:
// the reapers' injected clock is set just past the server's current time,
// and what must look old (an expired lease, a claim older than the stamp
// window, an update older than the un-leased horizon) is written by a raw
// driver client, as a foreign program would.

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
	"github.com/leasekeeper/leasekeeper/watchdog"
)

func TestMain(m *testing.M) { os.Exit(mongotest.Main(m)) }

const (
	fleetLease = 30 * time.Second
	// deadHost is where the dead workers ran: not any reaper's host, so no
	// pid proof applies and the runs' own statuses decide.
	deadHost = "gonehost"
)

// mongoFleet is one test's database on the MongoDB-wire test server, a raw
// driver handle on it (the foreign writer), and the manual clock the
// reapers read.
type mongoFleet struct {
	t     *testing.T
	ctx   context.Context
	uri   string
	db    string
	raw   *mongo.Database
	cards *mongo.Collection
	clock *boardtest.ManualClock
	// s is the store the workers wrote through (one more client).
	s *mongostore.Store
}

func newMongoFleet(t *testing.T) *mongoFleet {
	t.Helper()
	f := &mongoFleet{t: t, ctx: t.Context(), uri: mongotest.URI(t), db: mongotest.Database(t)}
	f.raw = mongotest.Client(t).Database(f.db)
	f.cards = f.raw.Collection("cards")
	f.clock = boardtest.NewManualClock(f.serverNow())
	f.s = f.open()
	return f
}

// open connects one more store client to the fleet's database, as another
// agent would.
func (f *mongoFleet) open() *mongostore.Store {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	s, err := mongostore.Open(ctx, mongostore.Options{URI: f.uri, Database: f.db, Clock: f.clock, Lease: fleetLease, EventLag: serializedServer})
	if err != nil {
		f.t.Fatalf("mongostore.Open: %v", err)
	}
	f.t.Cleanup(func() {
		if err := s.Close(); err != nil {
			f.t.Errorf("Close: %v", err)
		}
	})
	return s
}

// reaper builds a fleet reaper over s with its own agent marker.
func (f *mongoFleet) reaper(s board.Store, marker string, gate func() bool) *watchdog.Reaper {
	f.t.Helper()
	r, err := watchdog.New(watchdog.Config{
		Store: s, Marker: marker, Fleet: true,
		// A small pool keeps cards of one pass side by side without
		// flooding the test server, which serializes every request on
		// the test's database.
		Workers: 2,
		Lease:   func() time.Duration { return fleetLease },
		Enabled: gate,
	})
	if err != nil {
		f.t.Fatalf("watchdog.New(%s): %v", marker, err)
	}
	return r
}

// serverNow reads the server's clock the way the store does.
func (f *mongoFleet) serverNow() time.Time {
	f.t.Helper()
	raw, err := f.raw.RunCommand(f.ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	if err != nil {
		f.t.Fatalf("hello: %v", err)
	}
	ms, ok := raw.Lookup("localTime").DateTimeOK()
	if !ok {
		f.t.Fatal("the hello reply has no localTime")
	}
	return time.UnixMilli(ms).UTC()
}

// pruneEvents deletes the event log, as a retention job would. The setup's
// history is not under test, and the FerretDB-backed test server has no
// secondary index to serve the log's lookups (it scans the collection on
// every append), so a long setup history would slow every later write.
// Checks read only the events written after the prune.
func (f *mongoFleet) pruneEvents() {
	f.t.Helper()
	// Publish and clear every pending outbox first, so the whole log is in
	// the collection.
	if _, err := f.s.CompactEvents(f.ctx, time.Now().Add(24*time.Hour)); err != nil {
		f.t.Fatalf("CompactEvents: %v", err)
	}
	if _, err := f.raw.Collection("events").DeleteMany(f.ctx, bson.D{}); err != nil {
		f.t.Fatalf("prune the event log: %v", err)
	}
}

// foreignMany applies a raw update to the cards with the given ids and
// checks every one matched.
func (f *mongoFleet) foreignMany(ids []string, update bson.D) {
	f.t.Helper()
	res, err := f.cards.UpdateMany(f.ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, update)
	if err != nil || res.MatchedCount != int64(len(ids)) {
		f.t.Fatalf("foreign write to %d cards: %+v, %v", len(ids), res, err)
	}
}

// expireAndAge is the foreign write that stands in for time passing on the
// server: the lease ended a minute ago and the claim began ten minutes ago
// (past the stamp window of two leases).
func (f *mongoFleet) expireAndAge(ids []string) {
	f.t.Helper()
	now := f.serverNow()
	f.foreignMany(ids, bson.D{{Key: "$set", Value: bson.D{
		{Key: "claim_lease_until", Value: now.Add(-time.Minute)},
		{Key: "claimed_at", Value: now.Add(-10 * time.Minute)},
	}}})
}

// strip removes the lease and the fence from cards, as an old binary's
// whole-document replace does (DESIGN.md#unleased-sweep), and sets updated_at.
func (f *mongoFleet) strip(ids []string, updatedAt time.Time) {
	f.t.Helper()
	f.foreignMany(ids, bson.D{
		{Key: "$unset", Value: bson.D{{Key: "claim_epoch", Value: ""}, {Key: "claim_lease_until", Value: ""}}},
		{Key: "$set", Value: bson.D{{Key: "updated_at", Value: updatedAt}}},
	})
}

// launch is what a worker on deadHost did before it died: a card created
// in state, claimed, and — unless status is empty — a run recorded with
// that status and stamped on the card.
func (f *mongoFleet) launch(s board.Store, id, state string, pid int, status board.RunStatus) board.ClaimToken {
	f.t.Helper()
	tok, err := launch(f.ctx, s, id, state, pid, status)
	if err != nil {
		f.t.Fatal(err)
	}
	return tok
}

// launch is mongoFleet.launch for goroutines other than the test's, which
// may not stop the test.
func launch(ctx context.Context, s board.Store, id, state string, pid int, status board.RunStatus) (board.ClaimToken, error) {
	if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: id, State: state, Actor: "cli"}); err != nil {
		return board.ClaimToken{}, fmt.Errorf("CreateCard %s: %w", id, err)
	}
	marker := board.WorkerMarker(deadHost, pid)
	card, err := s.Claim(ctx, board.ClaimParams{Card: id, Marker: marker, Lease: fleetLease})
	tok := card.Token()
	if err != nil {
		return board.ClaimToken{}, fmt.Errorf("Claim %s by %s: %w", id, marker, err)
	}
	if status == "" {
		return tok, nil
	}
	run := board.Run{ID: id + "-run", Card: id, Status: status, Owner: marker, Epoch: tok.Epoch, Host: deadHost, PID: pid}
	if status == board.RunFailedResumable {
		run.Checkpoint = "step-3"
	}
	if _, err := s.CreateRun(ctx, board.CreateRunParams{Token: tok, Run: run}); err != nil {
		return board.ClaimToken{}, fmt.Errorf("CreateRun %s: %w", run.ID, err)
	}
	if err := s.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: id, Token: tok, RunID: run.ID}); err != nil {
		return board.ClaimToken{}, fmt.Errorf("SetLastRunOwned %s: %w", id, err)
	}
	return tok, nil
}

func (f *mongoFleet) get(id string) board.Card {
	f.t.Helper()
	c, err := f.s.GetCard(f.ctx, board.GetCardParams{ID: id})
	if err != nil {
		f.t.Fatalf("GetCard %s: %v", id, err)
	}
	return c
}

func (f *mongoFleet) events(after int64) []board.Event {
	f.t.Helper()
	evs, err := f.s.Events(f.ctx, board.EventsParams{After: after, Limit: 0})
	if err != nil {
		f.t.Fatalf("Events: %v", err)
	}
	return evs
}

func (f *mongoFleet) lastSeq() int64 {
	f.t.Helper()
	evs := f.events(0)
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}

// fleetKind is the dead worker's last word on one card of the race.
type fleetKind struct {
	name   string
	state  string          // where the worker left the card
	status board.RunStatus // "" for no run
	// What exactly one reaper must do with it.
	outcome    watchdog.Outcome
	finalState string
	filing     *board.Event // the one state event, or nil for none
}

// serializedServer is the event lag for the test server, which applies one
// command at a time on a database, so no write becomes visible out of its
// stamp's order
// (mongostore.Options.EventLag).
const serializedServer time.Duration = -1

// TestFleetReapersTransferEachCardExactlyOnce: DESIGN.md#transfer-first. Three agents,
// each with its own store client and marker and the gate on, race their
// passes over 200 expired claims of dead workers. The transfer CAS must
// elect exactly one winner per card: one recovery claim per card in the
// event log, epochs strictly increasing, one filing or return per card,
// and no card entering a launch state twice.
func TestFleetReapersTransferEachCardExactlyOnce(t *testing.T) {
	t.Parallel()
	// 200 cards as the issue asks; -short keeps the same shape at 64.
	perKind := 50
	if testing.Short() {
		perKind = 16
	}
	f := newMongoFleet(t)
	b, err := f.s.LoadBoard(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	kinds := []fleetKind{
		{name: "finished", state: board.StateInProgress, status: board.RunFinished,
			outcome: watchdog.OutcomeFiled, finalState: board.StateDone,
			filing: &board.Event{Reason: board.ReasonRunFinished, Data: board.EventData{From: board.StateInProgress, To: board.StateDone}}},
		{name: "failed", state: board.StateInProgress, status: board.RunFailed,
			outcome: watchdog.OutcomeFiled, finalState: board.StateFailed,
			filing: &board.Event{Reason: board.ReasonRunFailed, Data: board.EventData{From: board.StateInProgress, To: board.StateFailed}}},
		{name: "resumable", state: board.StateInProgress, status: board.RunFailedResumable,
			outcome: watchdog.OutcomeFiled, finalState: b.FirstPool(),
			filing: &board.Event{Reason: board.ReasonWatchdog, Data: board.EventData{From: board.StateInProgress, To: b.FirstPool()}}},
		// Half the no-run claims sit in the running column (past the stamp
		// window), half in the launch column they were claimed from. On
		// the fleet the running column is not a pool state, so a card
		// there goes back to the pool rather than being left free in it.
		{name: "norun-running", state: board.StateInProgress,
			outcome: watchdog.OutcomeFiled, finalState: b.FirstPool(),
			filing: &board.Event{Reason: board.ReasonWatchdog, Data: board.EventData{From: board.StateInProgress, To: b.FirstPool()}}},
		{name: "norun-ready", state: board.StateReady,
			outcome: watchdog.OutcomeReleased, finalState: board.StateReady},
	}
	kindOf := map[string]fleetKind{}
	workerTok := map[string]board.ClaimToken{}
	var all []string
	for ki, k := range kinds {
		n := perKind
		if k.status == "" {
			n = perKind / 2
		}
		for i := range n {
			id := fmt.Sprintf("%s-%03d", k.name, i)
			kindOf[id] = k
			all = append(all, id)
			workerTok[id] = f.launch(f.s, id, k.state, 1000+100*ki+i, k.status)
			if len(all)%50 == 0 {
				f.pruneEvents()
			}
		}
	}
	if want := 3*perKind + 2*(perKind/2); len(all) != want {
		t.Fatalf("set up %d cards, want %d", len(all), want)
	}
	f.pruneEvents()
	f.expireAndAge(all)
	// The reapers' clock reads the server's time now. Every worker lease
	// ended a minute before it; every recovery lease a transfer grants
	// from here on ends after it, so no reaper's recovery sweep can take
	// another's claim in the middle of its work.
	f.clock.Set(f.serverNow().Add(time.Second))
	if n := len(f.events(0)); n != 0 {
		t.Fatalf("the log holds %d events before the race, want it pruned", n)
	}

	gate := func() bool { return true }
	reapers := make([]*watchdog.Reaper, 3)
	for i := range reapers {
		reapers[i] = f.reaper(f.open(), fmt.Sprintf("agent%d-%d", i, 5000+i), gate)
	}
	results := make([][]watchdog.CardResult, len(reapers))
	errs := make([]error, len(reapers))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, r := range reapers {
		wg.Go(func() {
			<-start
			// Pass until a pass lists nothing; bounded in count, so a
			// reaper that never settles fails instead of hanging.
			for range 12 {
				res, err := r.RunOnce(f.ctx, false)
				if err != nil {
					errs[i] = err
					return
				}
				results[i] = append(results[i], res.Cards...)
				for _, sw := range res.Sweeps {
					errs[i] = fmt.Errorf("pass of %s swept %+v: no claim here is abandoned", r.RecoveryMarker(), sw)
					return
				}
				if len(res.Cards) == 0 {
					return
				}
			}
			errs[i] = fmt.Errorf("%s still listed cards after 12 passes", r.RecoveryMarker())
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	// The reapers' own records: one transfer per card, every loser a clean
	// skip, and no reaper did all the work (they really raced).
	won := map[string]watchdog.CardResult{}
	perReaper := make([]int, len(reapers))
	for i, rs := range results {
		for _, cr := range rs {
			switch {
			case cr.Token != (board.ClaimToken{}):
				if prev, dup := won[cr.Card]; dup {
					t.Errorf("card %s transferred twice: to %+v and %+v", cr.Card, prev.Token, cr.Token)
				}
				won[cr.Card] = cr
				perReaper[i]++
			case cr.Outcome != watchdog.OutcomeSkippedConflict:
				t.Errorf("card %s: a losing reaper's outcome = %s (decision %s, err %v), want %s",
					cr.Card, cr.Outcome, cr.Decision.Rule, cr.Err, watchdog.OutcomeSkippedConflict)
			}
		}
	}
	t.Logf("transfers won per reaper: %v", perReaper)
	for _, id := range all {
		cr, ok := won[id]
		if !ok {
			t.Errorf("card %s was never transferred", id)
			continue
		}
		if want := kindOf[id].outcome; cr.Outcome != want {
			t.Errorf("card %s outcome = %s (decision %s: %s, err %v), want %s", id, cr.Outcome, cr.Decision.Rule, cr.Decision.Reason, cr.Err, want)
		}
	}

	// The event log, which every client shares, is the judge.
	type history struct {
		claims    []board.Event // claimed events after the setup
		recovery  int
		releases  int
		states    []board.Event
		launchIns int
	}
	hist := map[string]*history{}
	for _, ev := range f.events(0) {
		h := hist[ev.Card]
		if h == nil {
			h = &history{}
			hist[ev.Card] = h
		}
		switch ev.Type {
		case board.EventClaimed:
			h.claims = append(h.claims, ev)
			if board.IsRecoveryMarker(ev.Data.Marker) {
				h.recovery++
			}
		case board.EventReleased:
			h.releases++
		case board.EventState:
			h.states = append(h.states, ev)
			if b.IsLaunch(ev.Data.To) {
				h.launchIns++
			}
		}
	}
	for _, id := range all {
		k, h := kindOf[id], hist[id]
		if h == nil {
			t.Errorf("card %s: no events after the setup, want a transfer", id)
			continue
		}
		if h.recovery != 1 || len(h.claims) != 1 {
			t.Errorf("card %s: %d claimed events (%d by a reaper), want exactly one recovery claim: %+v", id, len(h.claims), h.recovery, h.claims)
		}
		if h.releases != 1 {
			t.Errorf("card %s: released %d times, want once", id, h.releases)
		}
		if h.launchIns > 1 {
			t.Errorf("card %s entered a launch state %d times: %+v", id, h.launchIns, h.states)
		}
		switch {
		case k.filing == nil && len(h.states) != 0:
			t.Errorf("card %s (%s) was moved: %+v, want release only", id, k.name, h.states)
		case k.filing != nil && len(h.states) != 1:
			t.Errorf("card %s (%s): %d state events %+v, want exactly one filing", id, k.name, len(h.states), h.states)
		case k.filing != nil:
			ev := h.states[0]
			if ev.Reason != k.filing.Reason || ev.Data.From != k.filing.Data.From || ev.Data.To != k.filing.Data.To {
				t.Errorf("card %s (%s): filing %s → %s reason %q, want %s → %s reason %q", id, k.name,
					ev.Data.From, ev.Data.To, ev.Reason, k.filing.Data.From, k.filing.Data.To, k.filing.Reason)
			}
			if board.IsMachineReason(ev.Reason) && ev.Actor != "" {
				t.Errorf("card %s: machine filing carries actor %q, want it blanked", id, ev.Actor)
			}
		}
	}
	// Epochs strictly increase per card: the dead worker's, then the one
	// recovery claim's.
	for _, id := range all {
		h := hist[id]
		if h == nil || len(h.claims) == 0 {
			continue
		}
		last := workerTok[id].Epoch
		for _, ev := range h.claims {
			if ev.Data.Epoch <= last {
				t.Errorf("card %s: claimed at epoch %d after %d", id, ev.Data.Epoch, last)
			}
			last = ev.Data.Epoch
		}
	}
	// And the cards themselves: free, where the run put them, at the
	// winner's fence.
	for _, id := range all {
		c := f.get(id)
		if c.Claimed() || c.State != kindOf[id].finalState {
			t.Errorf("card %s = %s claimed by %q, want %s and free", id, c.State, c.Claim, kindOf[id].finalState)
		}
		if cr, ok := won[id]; ok && c.ClaimEpoch != cr.Token.Epoch {
			t.Errorf("card %s epoch = %d, want the winning transfer's %d", id, c.ClaimEpoch, cr.Token.Epoch)
		}
	}
}

// TestFleetUnleasedSweep: DESIGN.md#unleased-sweep, never run against the real twin
// before. Old binaries stripped lease and fence from a crowd of claims.
// With the gate off, one pass releases exactly the running-column claims
// with a recorded run whose disposition is complete / fail / repark, and
// conserves everything else. 150 conserved claims older than them, which
// the query must not select, cannot starve the batch of 100.
func TestFleetUnleasedSweep(t *testing.T) {
	t.Parallel()
	f := newMongoFleet(t)
	type card struct {
		id     string
		state  string
		status board.RunStatus // "" no run
		pruned bool            // a run pointer whose run is gone
		// selected: the query lists it (running column, recorded run);
		// filedTo: the sweep files it there and releases it (a settled
		// disposition: released bare, the card would be stranded in the
		// running column, which is not a pool state on the fleet).
		selected bool
		filedTo  string
	}
	cards := []card{
		{id: "rel-finished", state: board.StateInProgress, status: board.RunFinished, selected: true, filedTo: board.StateDone},
		{id: "rel-failed", state: board.StateInProgress, status: board.RunFailed, selected: true, filedTo: board.StateFailed},
		{id: "rel-resumable", state: board.StateInProgress, status: board.RunFailedResumable, selected: true, filedTo: board.StateReady},
		{id: "keep-paused", state: board.StateInProgress, status: board.RunPausedWaitingHuman, selected: true},
		{id: "keep-paused-operator", state: board.StateInProgress, status: board.RunPausedOperator, selected: true},
		{id: "keep-cancelled", state: board.StateInProgress, status: board.RunCancelled, selected: true},
		{id: "keep-running", state: board.StateInProgress, status: board.RunRunning, selected: true},
		{id: "keep-pruned", state: board.StateInProgress, pruned: true, selected: true},
		{id: "keep-norun", state: board.StateInProgress},
		{id: "keep-outside-running", state: board.StateReady, status: board.RunFinished},
	}
	toks := map[string]board.ClaimToken{}
	for i, c := range cards {
		toks[c.id] = f.launch(f.s, c.id, c.state, 2000+i, c.status)
		if c.pruned {
			if err := f.s.SetLastRunOwned(f.ctx, board.SetLastRunOwnedParams{Card: c.id, Token: toks[c.id], RunID: c.id + "-gone-run"}); err != nil {
				t.Fatalf("SetLastRunOwned: %v", err)
			}
		}
	}
	// The crowd: conserved shapes the query must not select, claimed by an
	// old binary (a bare marker, no lease, no fence) before every card
	// above was last written. Half have no run, half sit outside the
	// running column with a run recorded.
	const crowd = 150
	var crowdIDs, crowdRunning, crowdReady []string
	for i := range crowd {
		id := fmt.Sprintf("old-%03d", i)
		state := board.StateInProgress
		if i%2 == 1 {
			state = board.StateReady
			crowdReady = append(crowdReady, id)
		} else {
			crowdRunning = append(crowdRunning, id)
		}
		crowdIDs = append(crowdIDs, id)
		if _, err := f.s.CreateCard(f.ctx, board.CreateCardParams{ID: id, State: state, Actor: "cli"}); err != nil {
			t.Fatalf("CreateCard %s: %v", id, err)
		}
		if len(crowdIDs)%50 == 0 {
			f.pruneEvents()
		}
	}
	f.pruneEvents()
	now := f.serverNow()
	// A stripped card updated within the horizon is not swept yet.
	f.launch(f.s, "fresh-finished", board.StateInProgress, 2900, board.RunFinished)
	f.strip([]string{"fresh-finished"}, now.Add(-time.Hour))
	// A card whose lease survived is the gated reap's, never this sweep's.
	leased := f.launch(f.s, "leased-finished", board.StateInProgress, 2901, board.RunFinished)
	f.expireAndAge([]string{"leased-finished"})
	var ids []string
	for _, c := range cards {
		ids = append(ids, c.id)
	}
	f.strip(ids, now.Add(-48*time.Hour))
	oldBinary := board.WorkerMarker("oldhost", 3000)
	f.foreignMany(crowdReady, bson.D{{Key: "$set", Value: bson.D{{Key: "last_run_id", Value: "old-run"}, {Key: "runs", Value: bson.A{"old-run"}}}}})
	f.foreignMany(crowdIDs, bson.D{{Key: "$set", Value: bson.D{{Key: "claim", Value: oldBinary}}}})
	f.strip(crowdRunning, now.Add(-96*time.Hour))
	f.strip(crowdReady, now.Add(-96*time.Hour+time.Second))
	f.clock.Set(now.Add(time.Second))
	seq := f.lastSeq()

	r := f.reaper(f.open(), "agent1-6001", func() bool { return false })
	res, err := r.RunOnce(f.ctx, false)
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	if res.Enabled || len(res.Cards) != 0 {
		t.Errorf("gate off: enabled=%v, decided %d cards; want nothing decided", res.Enabled, len(res.Cards))
	}
	swept := map[string]watchdog.SweepResult{}
	for _, sw := range res.Sweeps {
		if sw.Sweep != watchdog.SweepUnleased {
			t.Errorf("unexpected %s sweep of %s", sw.Sweep, sw.Card)
			continue
		}
		swept[sw.Card] = sw
	}
	for _, c := range cards {
		sw, ok := swept[c.id]
		switch {
		case ok != c.selected:
			t.Errorf("%s: in the sweep = %v, want %v (the selection lives in the query)", c.id, ok, c.selected)
		case c.filedTo != "" && (sw.Outcome != watchdog.OutcomeFiled || sw.FiledTo != c.filedTo):
			t.Errorf("%s: sweep outcome = %s to %q (%+v), want filed to %s", c.id, sw.Outcome, sw.FiledTo, sw.Decision, c.filedTo)
		case c.selected && c.filedTo == "" && sw.Outcome != watchdog.OutcomeKept:
			t.Errorf("%s: sweep outcome = %s (%+v), want kept", c.id, sw.Outcome, sw.Decision)
		}
		got := f.get(c.id)
		if want := cmp.Or(c.filedTo, c.state); got.State != want {
			t.Errorf("%s is in %s, want %s", c.id, got.State, want)
		}
		if c.filedTo != "" {
			if got.Claimed() {
				t.Errorf("%s still claimed by %s, want released", c.id, got.Claim)
			}
		} else if got.Claim != toks[c.id].Marker {
			t.Errorf("%s claim = %q, want the conserved %q", c.id, got.Claim, toks[c.id].Marker)
		}
	}
	for _, id := range append(crowdIDs, "fresh-finished", "leased-finished") {
		if _, ok := swept[id]; ok {
			t.Errorf("%s was swept; the query must not select it", id)
		}
		if c := f.get(id); !c.Claimed() {
			t.Errorf("%s was released; want its claim conserved", id)
		}
	}
	if got, err := f.s.ListCards(f.ctx, board.ListCardsParams{ClaimedOnly: true}); err != nil || len(got) < crowd {
		t.Errorf("claimed cards = %d, %v; want the crowd's %d among them", len(got), err, crowd)
	}
	if c := f.get("leased-finished"); c.Token() != leased {
		t.Errorf("leased-finished claim = %+v, want %+v untouched", c.Token(), leased)
	}
	// A kept run is read, never promoted: promotion would be a decision.
	if run, err := f.s.GetRun(f.ctx, board.GetRunParams{ID: "keep-running-run"}); err != nil || run.Status != board.RunRunning {
		t.Errorf("keep-running's run = %s, %v; want still running", run.Status, err)
	}
	// Transfer first, then the filing, then the release: nothing else,
	// and only on the settled cards.
	written := map[string][]board.EventType{}
	for _, ev := range f.events(seq) {
		written[ev.Card] = append(written[ev.Card], ev.Type)
	}
	want := []board.EventType{board.EventClaimed, board.EventState, board.EventReleased}
	for _, c := range cards {
		if got := written[c.id]; c.filedTo != "" && !slices.Equal(got, want) {
			t.Errorf("%s: events %v, want %v", c.id, got, want)
		} else if c.filedTo == "" && len(got) != 0 {
			t.Errorf("%s: the sweep wrote %v on a conserved card", c.id, got)
		}
		delete(written, c.id)
	}
	if len(written) != 0 {
		t.Errorf("the sweep wrote on cards it must not touch: %v", written)
	}
}

// TestFleetGatedReapTakesStrippedClaims: with the gate on, the candidate
// listing's un-leased arm (DESIGN.md#unleased-arm) hands the reaper claims a foreign
// write stripped of lease and fence once they are older than the horizon.
// The transfer names the missing epoch, the new fence is above the lost
// one, and the decision then files the card like any other; a stripped
// claim whose run is paused is kept without a transfer.
func TestFleetGatedReapTakesStrippedClaims(t *testing.T) {
	t.Parallel()
	f := newMongoFleet(t)
	finished := f.launch(f.s, "finished", board.StateInProgress, 5001, board.RunFinished)
	paused := f.launch(f.s, "paused", board.StateInProgress, 5002, board.RunPausedWaitingHuman)
	f.launch(f.s, "recent", board.StateInProgress, 5003, board.RunFinished)
	now := f.serverNow()
	f.strip([]string{"finished", "paused"}, now.Add(-48*time.Hour))
	f.strip([]string{"recent"}, now.Add(-time.Hour))
	f.clock.Set(now.Add(time.Second))
	seq := f.lastSeq()

	r := f.reaper(f.open(), "agent1-9001", func() bool { return true })
	res, err := r.RunOnce(f.ctx, false)
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	cr, ok := res.Card("finished")
	if !ok || cr.Prev != (board.ClaimToken{Marker: finished.Marker}) || cr.Outcome != watchdog.OutcomeFiled {
		t.Fatalf("finished: record %+v (listed %v), want the stripped claim %s@0 transferred and filed", cr, ok, finished.Marker)
	}
	if cr.Token.Epoch <= finished.Epoch {
		t.Errorf("recovery epoch %d, want above the lost epoch %d", cr.Token.Epoch, finished.Epoch)
	}
	if c := f.get("finished"); c.State != board.StateDone || c.Claimed() || c.ClaimEpoch != cr.Token.Epoch {
		t.Errorf("finished = %s claimed by %q at epoch %d, want done, free, at %d", c.State, c.Claim, c.ClaimEpoch, cr.Token.Epoch)
	}
	if cr, ok := res.Card("paused"); !ok || cr.Outcome != watchdog.OutcomeKept || cr.Token != (board.ClaimToken{}) {
		t.Errorf("paused: record %+v (listed %v), want kept without a transfer", cr, ok)
	}
	if c := f.get("paused"); c.Claim != paused.Marker || c.ClaimEpoch != 0 {
		t.Errorf("paused claim = %s@%d, want the stripped %s@0 conserved", c.Claim, c.ClaimEpoch, paused.Marker)
	}
	if _, ok := res.Card("recent"); ok {
		t.Errorf("recent was listed: a stripped claim younger than the horizon is not a candidate")
	}
	for _, ev := range f.events(seq) {
		if ev.Card != "finished" {
			t.Errorf("the pass wrote %s on %s: %+v", ev.Type, ev.Card, ev)
		}
	}
}

// TestFleetGateOff: DESIGN.md#gate. With the gate off nothing is decided — an
// expired claim over a finished run stays as it is — but an abandoned
// recovery claim is still released, one an old binary's write stripped of
// its lease too, and a live one is left to its holder. Turning the gate on
// (hot) lets the next pass decide.
func TestFleetGateOff(t *testing.T) {
	t.Parallel()
	f := newMongoFleet(t)
	other := f.open() // another agent's client
	const otherReaper = board.RecoveryPrefix + "otheragent-77"

	decided := f.launch(f.s, "decided", board.StateInProgress, 4001, board.RunFinished)
	f.launch(f.s, "abandoned", board.StateInProgress, 4002, board.RunFinished)
	f.launch(f.s, "held", board.StateInProgress, 4003, board.RunPausedOperator)
	f.launch(f.s, "stripped", board.StateInProgress, 4004, board.RunFinished)
	f.launch(f.s, "pooled", board.StateReady, 4005, board.RunFinished)
	f.expireAndAge([]string{"decided", "abandoned", "held", "stripped", "pooled"})
	// The other agent's reaper transferred four cards, then died; three
	// recovery leases have ended, the other has not.
	reclaim := func(id string) board.ClaimToken {
		c, err := other.GetCard(f.ctx, board.GetCardParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		card, err := other.ReclaimExpired(f.ctx, board.ReclaimExpiredParams{Card: id, Prev: c.Token(), RecoveryMarker: otherReaper, Cutoff: f.serverNow(), Lease: fleetLease})
		tok := card.Token()
		if err != nil {
			t.Fatalf("ReclaimExpired %s: %v", id, err)
		}
		return tok
	}
	abandoned := reclaim("abandoned")
	if err := other.ExpireClaimOwned(f.ctx, board.OwnedParams{Card: "abandoned", Token: abandoned}); err != nil {
		t.Fatalf("ExpireClaimOwned: %v", err)
	}
	pooled := reclaim("pooled")
	if err := other.ExpireClaimOwned(f.ctx, board.OwnedParams{Card: "pooled", Token: pooled}); err != nil {
		t.Fatalf("ExpireClaimOwned: %v", err)
	}
	held := reclaim("held")
	// A recovery claim whose lease and fence a foreign write removed:
	// nobody can renew or release it by token any more, and the recovery
	// listing selects by marker, so the sweep still finds it.
	stripped := reclaim("stripped")
	f.strip([]string{"stripped"}, f.serverNow())
	f.clock.Set(f.serverNow().Add(time.Second))
	seq := f.lastSeq()

	var gate sync.Mutex
	on := false
	r := f.reaper(f.open(), "agent1-7001", func() bool { gate.Lock(); defer gate.Unlock(); return on })
	res, err := r.RunOnce(f.ctx, false)
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	if res.Enabled || len(res.Cards) != 0 {
		t.Errorf("gate off: enabled=%v, decided %+v; want nothing decided", res.Enabled, res.Cards)
	}
	swept := map[string]watchdog.SweepResult{}
	for _, sw := range res.Sweeps {
		if sw.Sweep != watchdog.SweepRecovery {
			t.Errorf("unexpected %s sweep of %s", sw.Sweep, sw.Card)
		}
		swept[sw.Card] = sw
	}
	if len(swept) != 3 {
		t.Errorf("sweeps = %+v, want abandoned, pooled and stripped", res.Sweeps)
	}
	// In a pool column the release is a pure return to the pre-watchdog
	// state.
	if sw := swept["pooled"]; sw.Outcome != watchdog.OutcomeReleased {
		t.Errorf("pooled: %s, want released", sw.Outcome)
	}
	if c := f.get("pooled"); c.Claimed() || c.State != board.StateReady || c.ClaimEpoch != pooled.Epoch {
		t.Errorf("pooled = %s claimed by %q at epoch %d, want ready, free, at %d: release-only", c.State, c.Claim, c.ClaimEpoch, pooled.Epoch)
	}
	// In the fleet's running column a free card would be stranded: the
	// sweep files the finished run's card where its verdict says.
	if sw := swept["abandoned"]; sw.Outcome != watchdog.OutcomeFiled || sw.FiledTo != board.StateDone {
		t.Errorf("abandoned: %s to %q, want filed to done", sw.Outcome, sw.FiledTo)
	}
	if c := f.get("abandoned"); c.Claimed() || c.State != board.StateDone {
		t.Errorf("abandoned = %s claimed by %q, want done and free", c.State, c.Claim)
	}
	// A stripped recovery claim there cannot be transferred before the
	// un-leased horizon: it is conserved, never released into the column.
	if sw := swept["stripped"]; sw.Outcome == watchdog.OutcomeReleased || sw.Outcome == watchdog.OutcomeFiled {
		t.Errorf("stripped: %s, want conserved until the un-leased horizon", sw.Outcome)
	}
	if c := f.get("stripped"); c.Claim != stripped.Marker || c.State != board.StateInProgress {
		t.Errorf("stripped = %s claimed by %q, want in_progress under %q", c.State, c.Claim, stripped.Marker)
	}
	if c := f.get("decided"); c.Token() != decided || c.State != board.StateInProgress {
		t.Errorf("decided = %s held by %+v, want in_progress held by %+v: the gate stops decisions", c.State, c.Token(), decided)
	}
	if c := f.get("held"); c.Token() != held {
		t.Errorf("held = %+v, want the live recovery claim %+v left alone", c.Token(), held)
	}
	for _, ev := range f.events(seq) {
		if ev.Card != "abandoned" && ev.Card != "pooled" {
			t.Errorf("gate off wrote %s on %s: %+v", ev.Type, ev.Card, ev)
		}
	}

	// Hot reload: the same reaper, the gate flipped on, decides.
	gate.Lock()
	on = true
	gate.Unlock()
	res, err = r.RunOnce(f.ctx, false)
	if err != nil {
		t.Fatalf("RunOnce with the gate on: %v", err)
	}
	if cr, ok := res.Card("decided"); !ok || cr.Outcome != watchdog.OutcomeFiled {
		t.Errorf("gate on: decided's record = %+v (listed %v), want filed", cr, ok)
	}
	if c := f.get("decided"); c.State != board.StateDone || c.Claimed() {
		t.Errorf("decided = %s claimed by %q, want done and free", c.State, c.Claim)
	}
}

// TestFleetRunCeiling: DESIGN.md#twin-repark, the ceiling is the fleet's. A reparked
// card with 20 lifetime runs is filed to blocked; one with fewer goes back
// to the first pool state. Both are machine decisions: reason watchdog,
// actor blanked, no effect fires.
func TestFleetRunCeiling(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		priorRuns int // runs before the last one
		want      string
	}{
		{"a healthy card returns to the pool", 2, board.StateReady},
		{"nineteen lifetime runs return to the pool", board.DefaultMaxAttempts - 2, board.StateReady},
		{"twenty lifetime runs file the card to blocked", board.DefaultMaxAttempts - 1, board.StateBlocked},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newMongoFleet(t)
			if _, err := f.s.CreateCard(f.ctx, board.CreateCardParams{ID: "c1", State: board.StateInProgress, Actor: "cli"}); err != nil {
				t.Fatal(err)
			}
			card, err := f.s.Claim(f.ctx, board.ClaimParams{Card: "c1", Marker: board.WorkerMarker(deadHost, 4241), Lease: fleetLease})
			old := card.Token()
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.priorRuns {
				if _, err := f.s.CreateRun(f.ctx, board.CreateRunParams{Token: old, Run: board.Run{ID: fmt.Sprintf("old-%d", i), Card: "c1", Status: board.RunFailedResumable}}); err != nil {
					t.Fatalf("CreateRun: %v", err)
				}
			}
			if err := f.s.ReleaseOwned(f.ctx, board.OwnedParams{Card: "c1", Token: old}); err != nil {
				t.Fatal(err)
			}
			claimed, err := f.s.Claim(f.ctx, board.ClaimParams{Card: "c1", Marker: board.WorkerMarker(deadHost, 4242), Lease: fleetLease})
			tok := claimed.Token()
			if err != nil {
				t.Fatal(err)
			}
			// The release filed the card out of the running column; the
			// worker that claimed it again launches it back there.
			if _, err := f.s.SetStateOwned(f.ctx, board.SetStateOwnedParams{Card: "c1", Token: tok, To: board.StateInProgress}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.s.CreateRun(f.ctx, board.CreateRunParams{Token: tok, Run: board.Run{ID: "last", Card: "c1", Status: board.RunFailedResumable, Checkpoint: "step-3", Host: deadHost, PID: 4242}}); err != nil {
				t.Fatal(err)
			}
			if err := f.s.SetLastRunOwned(f.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: "last"}); err != nil {
				t.Fatal(err)
			}
			if got := len(f.get("c1").Runs); got != tc.priorRuns+1 {
				t.Fatalf("card has %d runs, want %d", got, tc.priorRuns+1)
			}
			f.expireAndAge([]string{"c1"})
			f.clock.Set(f.serverNow().Add(time.Second))
			seq := f.lastSeq()

			r := f.reaper(f.open(), "agent1-8001", func() bool { return true })
			res, err := r.RunOnce(f.ctx, false)
			if err != nil {
				t.Fatalf("RunOnce: %v", err)
			}
			cr, ok := res.Card("c1")
			// The ceiling is the retry policy's limit (DESIGN.md#retries):
			// a repark while attempts remain, a give-up once they are spent.
			action := watchdog.ActionRepark
			if tc.want == board.StateBlocked {
				action = watchdog.ActionGiveUp
			}
			if !ok || cr.Outcome != watchdog.OutcomeFiled || cr.Decision.Action != action || cr.FiledTo != tc.want {
				t.Fatalf("record = %+v (listed %v), want a %s filed to %s", cr, ok, action, tc.want)
			}
			if c := f.get("c1"); c.State != tc.want || c.Claimed() {
				t.Errorf("c1 = %s claimed by %q, want %s and free", c.State, c.Claim, tc.want)
			}
			var states []board.Event
			for _, ev := range f.events(seq) {
				if ev.Type == board.EventState {
					states = append(states, ev)
				}
			}
			if len(states) != 1 {
				t.Fatalf("state events = %+v, want one filing", states)
			}
			if ev := states[0]; ev.Reason != board.ReasonWatchdog || ev.FiresEffects() || ev.Actor != "" || ev.Data.To != tc.want {
				t.Errorf("filing = %+v, want to %s under machine provenance (reason watchdog, no actor, fires nothing)", ev, tc.want)
			}
		})
	}
}
