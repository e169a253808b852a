// Package boardtest is the conformance suite every board.Store must pass:
// the bbolt twin, the MongoDB twin and the plugin proxy run the same checks
// with one call, so the contract lives in one place and the twins can only
// diverge where DESIGN.md#twins says they do (Harness.Fleet).
//
// The suite lives in ordinary (non-test) files so other packages can import
// it, and it uses only the standard library and a linearizability checker,
// so a plugin author inherits no test framework.
//
//	func TestConformance(t *testing.T) {
//		boardtest.Exercise(t, boardtest.Harness{Open: openMyStore})
//	}
package boardtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// Config is what the suite asks a harness to open a store with.
type Config struct {
	Board board.Board
	Clock board.Clock
}

// Harness adapts one store implementation to the suite.
type Harness struct {
	// Open returns a fresh, empty store for one test and registers its
	// cleanup with t.
	Open func(t *testing.T, cfg Config) board.Store
	// Fleet is true for the MongoDB twin: leases, claimed_at and updated_at
	// come from the SERVER's clock (the injected Clock is ignored for
	// those), the epoch is max(stored+1, server ms) rather than stored+1,
	// and the candidate listing has an un-leased arm (DESIGN.md#unleased-arm).
	// Tests that depend on the local-only behaviour branch on it.
	Fleet bool
}

// Exercise runs every verb and every rule of the store contract as
// subtests. Each leaf subtest opens its own store and runs in parallel.
func Exercise(t *testing.T, h Harness) {
	t.Helper()
	if h.Open == nil {
		t.Fatal("boardtest: Harness.Open is nil")
	}
	t.Run("Claims", func(t *testing.T) { exerciseClaims(t, h) })
	t.Run("Owner", func(t *testing.T) { exerciseOwner(t, h) })
	t.Run("States", func(t *testing.T) { exerciseStates(t, h) })
	t.Run("Labels", func(t *testing.T) { exerciseLabels(t, h) })
	t.Run("Runs", func(t *testing.T) { exerciseRuns(t, h) })
	t.Run("Watchdog", func(t *testing.T) { exerciseWatchdog(t, h) })
	t.Run("Expired", func(t *testing.T) { exerciseExpired(t, h) })
	t.Run("Events", func(t *testing.T) { exerciseEvents(t, h) })
	t.Run("BadInput", func(t *testing.T) { exerciseBadInput(t, h) })
	t.Run("Admin", func(t *testing.T) { ExerciseAdmin(t, h) })
	t.Run("Lifecycle", func(t *testing.T) { exerciseLifecycle(t, h) })
	t.Run("Blockers", func(t *testing.T) { exerciseBlockers(t, h) })
	t.Run("Retention", func(t *testing.T) { exerciseRetention(t, h) })
	t.Run("Retries", func(t *testing.T) { exerciseRetries(t, h) })
}

// Markers used throughout the suite. Two workers, plus the recovery marker
// of a reaping agent.
const (
	markerA   = "worker-a-101"
	markerB   = "worker-b-202"
	recovery  = board.RecoveryPrefix + "agent-303"
	recovery2 = board.RecoveryPrefix + "agent-404"
	lease     = 30 * time.Second
)

// localEpoch is where the suite starts a local store's clock: a fixed,
// millisecond-aligned instant so exact lease values can be asserted.
var localEpoch = time.Date(2031, time.May, 6, 7, 8, 9, 0, time.UTC)

// env is one test's store, clock and helpers.
type env struct {
	t     *testing.T
	h     Harness
	s     board.Store
	clock *ManualClock
	b     board.Board
	ctx   context.Context
}

// open opens a fresh store for t. The board is the default board of the
// twin under test: on the local twin the running column is also a pool
// state (DESIGN.md#twin-repark).
func open(t *testing.T, h Harness) *env {
	t.Helper()
	t0 := localEpoch
	if h.Fleet {
		// Keep the injected clock near the server's, so nothing the fleet
		// twin still takes from the injected clock lands in another era.
		t0 = time.Now().UTC().Truncate(time.Millisecond)
	}
	e := &env{t: t, h: h, clock: NewManualClock(t0), b: board.DefaultBoard(!h.Fleet), ctx: t.Context()}
	e.s = h.Open(t, Config{Board: e.b, Clock: e.clock})
	if e.s == nil {
		t.Fatal("Harness.Open returned a nil store")
	}
	return e
}

// local reports whether exact values from the injected clock may be asserted.
func (e *env) local() bool { return !e.h.Fleet }

func (e *env) create(nc board.CreateCardParams) board.Card {
	e.t.Helper()
	c, err := e.s.CreateCard(e.ctx, nc)
	if err != nil {
		e.t.Fatalf("CreateCard(%+v): %v", nc, err)
	}
	return c
}

// card creates a card in the given state (empty: the store's default).
func (e *env) card(id, state string) board.Card {
	e.t.Helper()
	return e.create(board.CreateCardParams{ID: id, Title: "card " + id, State: state, Actor: "cli"})
}

func (e *env) get(id string) board.Card {
	e.t.Helper()
	c, err := e.s.GetCard(e.ctx, board.GetCardParams{ID: id})
	if err != nil {
		e.t.Fatalf("GetCard(%q): %v", id, err)
	}
	return c
}

func (e *env) claim(id, marker string) board.ClaimToken {
	e.t.Helper()
	card, err := e.s.Claim(e.ctx, board.ClaimParams{Card: id, Marker: marker, Lease: lease})
	tok := card.Token()
	if err != nil {
		e.t.Fatalf("Claim(%q, %q): %v", id, marker, err)
	}
	return tok
}

func (e *env) release(id string, tok board.ClaimToken) {
	e.t.Helper()
	if err := e.s.ReleaseOwned(e.ctx, board.OwnedParams{Card: id, Token: tok}); err != nil {
		e.t.Fatalf("ReleaseOwned(%q, %+v): %v", id, tok, err)
	}
}

func (e *env) setState(id, to string) {
	e.t.Helper()
	if err := e.s.SetState(e.ctx, board.MoveParams{Card: id, To: to, Actor: "cli"}); err != nil {
		e.t.Fatalf("SetState(%q → %q): %v", id, to, err)
	}
}

// reopen reopens id into to as an operator, failing the test on an error.
func (e *env) reopen(id, to string) {
	e.t.Helper()
	if err := e.s.Reopen(e.ctx, board.MoveParams{Card: id, To: to, Actor: "uid:0"}); err != nil {
		e.t.Fatalf("Reopen(%q → %q): %v", id, to, err)
	}
	if c := e.get(id); c.State != to {
		e.t.Fatalf("after Reopen(%q → %q) the card is %s", id, to, fmtCard(c))
	}
}

// reopenRefused checks that reopening the terminal card id into the first
// pool state is refused with ErrTransitionRejected and writes nothing.
func (e *env) reopenRefused(id, what string) {
	e.t.Helper()
	e.clock.Advance(time.Second)
	before := e.get(id)
	seq := e.lastSeq()
	err := e.s.Reopen(e.ctx, board.MoveParams{Card: id, To: e.b.FirstPool(), Actor: "uid:0"})
	wantErr(e.t, err, board.ErrTransitionRejected, what)
	e.unchanged(before, what)
	e.noEventsSince(seq, what)
}

// expire ends the holder's lease now and returns the card afterwards.
func (e *env) expire(id string, tok board.ClaimToken) board.Card {
	e.t.Helper()
	if err := e.s.ExpireClaimOwned(e.ctx, board.OwnedParams{Card: id, Token: tok}); err != nil {
		e.t.Fatalf("ExpireClaimOwned(%q, %+v): %v", id, tok, err)
	}
	c := e.get(id)
	if c.ClaimLeaseUntil.IsZero() {
		e.t.Fatalf("after ExpireClaimOwned the card has no lease: %s", fmtCard(c))
	}
	return c
}

// allEvents pages through the whole log.
func (e *env) allEvents() []board.Event {
	e.t.Helper()
	return e.eventsAfter(0)
}

func (e *env) eventsAfter(seq int64) []board.Event {
	e.t.Helper()
	var out []board.Event
	for {
		page, err := e.s.Events(e.ctx, board.EventsParams{After: seq, Limit: 500})
		if err != nil {
			e.t.Fatalf("Events(%d, 500): %v", seq, err)
		}
		out = append(out, page...)
		if len(page) < 500 {
			return out
		}
		seq = page[len(page)-1].Seq
	}
}

// lastSeq is the sequence number of the newest event (0 when none).
func (e *env) lastSeq() int64 {
	e.t.Helper()
	evs := e.allEvents()
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}

// noEventsSince fails when anything was logged after seq.
func (e *env) noEventsSince(seq int64, what string) {
	e.t.Helper()
	if evs := e.eventsAfter(seq); len(evs) != 0 {
		e.t.Errorf("%s wrote %d event(s), want none: %s", what, len(evs), fmtEvents(evs))
	}
}

// oneEventSince returns the single event logged after seq, failing when
// there is not exactly one of type want.
func (e *env) oneEventSince(seq int64, want board.EventType, what string) board.Event {
	e.t.Helper()
	evs := e.eventsAfter(seq)
	if len(evs) != 1 || evs[0].Type != want {
		e.t.Fatalf("%s logged %s, want exactly one %q event", what, fmtEvents(evs), want)
	}
	return evs[0]
}

// unchanged fails when the stored card differs from before in any field.
func (e *env) unchanged(before board.Card, what string) {
	e.t.Helper()
	if d := diffCards(e.get(before.ID), before); d != "" {
		e.t.Errorf("%s changed card %q, want it untouched: %s", what, before.ID, d)
	}
}

// wantErr fails unless errors.Is(err, target).
func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want %v", what, err, target)
	}
}

// wantConflict fails unless err is a claim conflict naming holder and epoch.
func wantConflict(t *testing.T, err error, holder string, epoch int64, what string) {
	t.Helper()
	if !errors.Is(err, board.ErrClaimConflict) {
		t.Errorf("%s: got error %v, want ErrClaimConflict", what, err)
		return
	}
	ce, ok := board.AsClaimConflict(err)
	if !ok {
		t.Errorf("%s: conflict %v does not carry a *board.ClaimConflictError (holder and epoch)", what, err)
		return
	}
	if ce.Holder != holder || ce.Epoch != epoch {
		t.Errorf("%s: conflict names holder %q epoch %d, want holder %q epoch %d", what, ce.Holder, ce.Epoch, holder, epoch)
	}
}

// claimFamily is the part of a card only claim verbs may write.
type claimFamily struct {
	Claim     string
	Epoch     int64
	ClaimedAt time.Time
	Lease     time.Time
}

func familyOf(c board.Card) claimFamily {
	return claimFamily{c.Claim, c.ClaimEpoch, c.ClaimedAt, c.ClaimLeaseUntil}
}

func (f claimFamily) equal(g claimFamily) bool {
	return f.Claim == g.Claim && f.Epoch == g.Epoch && f.ClaimedAt.Equal(g.ClaimedAt) && f.Lease.Equal(g.Lease)
}

func (f claimFamily) String() string {
	return fmt.Sprintf("{claim %q epoch %d claimed_at %s lease %s}", f.Claim, f.Epoch, fmtTime(f.ClaimedAt), fmtTime(f.Lease))
}

// diffCards lists the fields in which got and want differ. Times compare
// with Equal (a store may hand back another location or no monotonic
// reading), and a nil slice equals an empty one.
func diffCards(got, want board.Card) string {
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s: got %v, want %v", field, g, w)) }
	str := func(field, g, w string) {
		if g != w {
			add(field, fmt.Sprintf("%q", g), fmt.Sprintf("%q", w))
		}
	}
	tm := func(field string, g, w time.Time) {
		if !g.Equal(w) {
			add(field, fmtTime(g), fmtTime(w))
		}
	}
	strs := func(field string, g, w []string) {
		if !slices.Equal(g, w) {
			add(field, fmt.Sprintf("%q", g), fmt.Sprintf("%q", w))
		}
	}
	str("id", got.ID, want.ID)
	str("title", got.Title, want.Title)
	str("state", got.State, want.State)
	strs("labels", got.Labels, want.Labels)
	strs("depends_on", got.DependsOn, want.DependsOn)
	str("last_run_id", got.LastRunID, want.LastRunID)
	strs("runs", got.Runs, want.Runs)
	if got.AwaitingInput != want.AwaitingInput {
		add("awaiting_input", got.AwaitingInput, want.AwaitingInput)
	}
	if !gaveUpEqual(got.GaveUp, want.GaveUp) {
		add("gave_up", fmtGaveUp(got.GaveUp), fmtGaveUp(want.GaveUp))
	}
	str("state_reason", string(got.StateReason), string(want.StateReason))
	tm("created_at", got.CreatedAt, want.CreatedAt)
	tm("updated_at", got.UpdatedAt, want.UpdatedAt)
	str("promoted_by", got.PromotedBy, want.PromotedBy)
	str("claim", got.Claim, want.Claim)
	if got.ClaimEpoch != want.ClaimEpoch {
		add("claim_epoch", got.ClaimEpoch, want.ClaimEpoch)
	}
	tm("claimed_at", got.ClaimedAt, want.ClaimedAt)
	tm("claim_lease_until", got.ClaimLeaseUntil, want.ClaimLeaseUntil)
	if got.DisownedEpoch != want.DisownedEpoch {
		add("disowned_epoch", got.DisownedEpoch, want.DisownedEpoch)
	}
	return strings.Join(d, "; ")
}

func gaveUpEqual(a, b *board.GaveUp) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.RunID == b.RunID && a.State == b.State && a.Attempts == b.Attempts && a.Reason == b.Reason && a.At.Equal(b.At)
}

func fmtGaveUp(g *board.GaveUp) string {
	if g == nil {
		return "<nil>"
	}
	return fmt.Sprintf("{run %q state %q attempts %d reason %q at %s}", g.RunID, g.State, g.Attempts, g.Reason, fmtTime(g.At))
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "zero"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func fmtCard(c board.Card) string {
	return fmt.Sprintf("{id %q state %q labels %q claim %q epoch %d lease %s reason %q promoted_by %q}",
		c.ID, c.State, c.Labels, c.Claim, c.ClaimEpoch, fmtTime(c.ClaimLeaseUntil), c.StateReason, c.PromotedBy)
}

func fmtEvents(evs []board.Event) string {
	if len(evs) == 0 {
		return "[]"
	}
	parts := make([]string, len(evs))
	for i, ev := range evs {
		parts[i] = fmt.Sprintf("#%d %s card=%q reason=%q actor=%q data=%+v", ev.Seq, ev.Type, ev.Card, ev.Reason, ev.Actor, ev.Data)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// ids lists card ids in order.
func ids(cs []board.Card) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

func errIs(err, target error) bool { return errors.Is(err, target) }

// PageCards returns the cards of one page of ListExpiredClaimCandidates,
// for a test that reads a single page: s.ListExpiredClaimCandidates(...)
// can be passed to it whole.
func PageCards(p board.ListExpiredClaimCandidatesResult, err error) ([]board.Card, error) {
	return p.Cards, err
}
