package mongostore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

const (
	workerA  = "host-a-4242"
	workerB  = "host-b-4343"
	reaperR  = board.RecoveryPrefix + "agent-5151"
	testTerm = 30 * time.Second
)

// fleet is one test's store plus raw access to its database, to act as a
// foreign writer (another binary's write) and to read the server clock.
type fleet struct {
	t     *testing.T
	ctx   context.Context
	s     *mongostore.Store
	raw   *mongo.Database
	cards *mongo.Collection
}

func openFleet(t *testing.T, opts mongostore.Options) *fleet {
	t.Helper()
	db := mongotest.Database(t)
	opts.Database = db
	s := openStore(t, opts)
	raw := mongotest.Client(t).Database(db)
	return &fleet{t: t, ctx: t.Context(), s: s, raw: raw, cards: raw.Collection("cards")}
}

// serverNow reads the server's clock the way the store does.
func (f *fleet) serverNow() time.Time {
	f.t.Helper()
	raw, err := f.raw.RunCommand(f.ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	if err != nil {
		f.t.Fatalf("hello: %v", err)
	}
	ms, ok := raw.Lookup("localTime").DateTimeOK()
	if !ok {
		f.t.Fatal("hello reply has no localTime")
	}
	return time.UnixMilli(ms).UTC()
}

// count counts the documents of coll matching filter.
func (f *fleet) count(coll *mongo.Collection, filter bson.D) int {
	f.t.Helper()
	n, err := coll.CountDocuments(f.ctx, filter)
	if err != nil {
		f.t.Fatalf("count %s: %v", coll.Name(), err)
	}
	return int(n)
}

// foreign applies a raw update to a card, as another program would.
func (f *fleet) foreign(id string, update bson.D) {
	f.t.Helper()
	res, err := f.cards.UpdateOne(f.ctx, bson.D{{Key: "_id", Value: id}}, update)
	if err != nil || res.MatchedCount != 1 {
		f.t.Fatalf("foreign write to %q: matched %v, %v", id, res, err)
	}
}

func (f *fleet) create(id, state string) board.Card {
	f.t.Helper()
	c, err := f.s.CreateCard(f.ctx, board.CreateCardParams{ID: id, State: state, Actor: "cli"})
	if err != nil {
		f.t.Fatalf("CreateCard(%q): %v", id, err)
	}
	return c
}

func (f *fleet) claim(id, marker string) board.ClaimToken {
	f.t.Helper()
	card, err := f.s.Claim(f.ctx, board.ClaimParams{Card: id, Marker: marker, Lease: testTerm})
	tok := card.Token()
	if err != nil {
		f.t.Fatalf("Claim(%q, %q): %v", id, marker, err)
	}
	return tok
}

func (f *fleet) get(id string) board.Card {
	f.t.Helper()
	c, err := f.s.GetCard(f.ctx, board.GetCardParams{ID: id})
	if err != nil {
		f.t.Fatalf("GetCard(%q): %v", id, err)
	}
	return c
}

func wantConflict(t *testing.T, err error, holder string, epoch int64, what string) {
	t.Helper()
	ce, ok := board.AsClaimConflict(err)
	if !ok || !errors.Is(err, board.ErrClaimConflict) {
		t.Errorf("%s: got %v, want a claim conflict", what, err)
		return
	}
	if ce.Holder != holder || ce.Epoch != epoch {
		t.Errorf("%s: conflict names %q@%d, want %q@%d", what, ce.Holder, ce.Epoch, holder, epoch)
	}
}

// TestEpochSurvivesDroppedField: DESIGN.md#epoch-monotone. Another binary's write drops
// claim_epoch; a counter would restart at 1 and hand the same worker the
// same token twice. The server-clock floor keeps the fence going up.
func TestEpochSurvivesDroppedField(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	f.create("c1", board.StateReady)
	var prev board.ClaimToken
	for round := range 3 {
		tok := f.claim("c1", workerA)
		if tok.Epoch <= prev.Epoch {
			t.Fatalf("round %d: epoch %d after a dropped field, want above the previous %d", round, tok.Epoch, prev.Epoch)
		}
		if tok == prev {
			t.Fatalf("round %d: the same worker got the same token twice: %+v", round, tok)
		}
		if err := f.s.ReleaseOwned(f.ctx, board.OwnedParams{Card: "c1", Token: tok}); err != nil {
			t.Fatalf("ReleaseOwned: %v", err)
		}
		f.foreign("c1", bson.D{{Key: "$unset", Value: bson.D{{Key: "claim_epoch", Value: ""}}}})
		if c := f.get("c1"); c.ClaimEpoch != 0 {
			t.Fatalf("the foreign write did not drop the epoch: %d", c.ClaimEpoch)
		}
		prev = tok
	}
}

// TestEpochIsAtLeastServerMillis pins the floor itself: a fresh acquisition
// takes max(stored+1, server ms), so even a tiny stored epoch jumps to the
// server clock, and a stored epoch above it still steps by one.
func TestEpochIsAtLeastServerMillis(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	f.create("low", board.StateReady)
	f.create("high", board.StateReady)
	f.foreign("low", bson.D{{Key: "$set", Value: bson.D{{Key: "claim_epoch", Value: int64(7)}}}})
	future := f.serverNow().Add(1000 * time.Hour).UnixMilli()
	f.foreign("high", bson.D{{Key: "$set", Value: bson.D{{Key: "claim_epoch", Value: future}}}})

	// The store's reading of the server's clock may be up to a second old,
	// aged to now (DESIGN.md#twin-clock): it stands within its round trip
	// of the server's time, far above 7.
	before := f.serverNow().Add(-time.Second).UnixMilli()
	low := f.claim("low", workerA)
	if low.Epoch < before {
		t.Errorf("epoch over a stored 7 = %d, want at least the server's %d ms (less a second)", low.Epoch, before)
	}
	if got, want := f.claim("high", workerA).Epoch, future+1; got != want {
		t.Errorf("epoch over a stored %d = %d, want %d", future, got, want)
	}
}

// strip removes the lease and the fence from a card, as an old binary's
// whole-document replace does (DESIGN.md#unleased-sweep), and backdates updated_at.
func (f *fleet) strip(id string, updatedAt time.Time) {
	f.t.Helper()
	f.foreign(id, bson.D{
		{Key: "$unset", Value: bson.D{{Key: "claim_epoch", Value: ""}, {Key: "claim_lease_until", Value: ""}}},
		{Key: "$set", Value: bson.D{{Key: "updated_at", Value: updatedAt}}},
	})
}

// TestStrippedCardRefusesItsLiveHolder: DESIGN.md#lost-fence. With the epoch gone,
// every fenced verb refuses even the live holder's token, and the claim
// waits for the un-leased arm.
func TestStrippedCardRefusesItsLiveHolder(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	f.create("c1", board.StateInProgress)
	tok := f.claim("c1", workerA)
	if err := f.s.SetLastRunOwned(f.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: "run-1"}); err != nil {
		t.Fatal(err)
	}
	updated := f.serverNow()
	f.strip("c1", updated)
	stripped := f.get("c1")

	verbs := []struct {
		name string
		call func() error
	}{
		{"Claim", func() error {
			_, err := f.s.Claim(f.ctx, board.ClaimParams{Card: "c1", Marker: workerA, Lease: testTerm})
			return err
		}},
		{"RenewClaims", func() error {
			res, err := f.s.RenewClaims(f.ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: "c1", Token: tok}}, Lease: testTerm})
			if err != nil {
				return err
			}
			return res[0].Err
		}},
		{"SetStateOwned", func() error {
			_, err := f.s.SetStateOwned(f.ctx, board.SetStateOwnedParams{Card: "c1", Token: tok, To: board.StateDone})
			return err
		}},
		{"SetLastRunOwned", func() error {
			return f.s.SetLastRunOwned(f.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: "run-2"})
		}},
		{"SetAwaitingInputOwned", func() error {
			return f.s.SetAwaitingInputOwned(f.ctx, board.SetAwaitingInputOwnedParams{Card: "c1", Token: tok, Awaiting: true})
		}},
		{"SetGaveUpOwned", func() error {
			return f.s.SetGaveUpOwned(f.ctx, board.SetGaveUpOwnedParams{Card: "c1", Token: tok, GaveUp: &board.GaveUp{Reason: "x"}})
		}},
		{"ExpireClaimOwned", func() error { return f.s.ExpireClaimOwned(f.ctx, board.OwnedParams{Card: "c1", Token: tok}) }},
		{"DisownClaimOwned", func() error { return f.s.DisownClaimOwned(f.ctx, board.OwnedParams{Card: "c1", Token: tok}) }},
		{"ReleaseOwned", func() error { return f.s.ReleaseOwned(f.ctx, board.OwnedParams{Card: "c1", Token: tok}) }},
	}
	for _, v := range verbs {
		wantConflict(t, v.call(), workerA, 0, v.name+" by the live holder of a stripped card")
	}
	raw, err := f.cards.FindOne(f.ctx, bson.D{{Key: "_id", Value: "c1"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"claim_epoch", "claim_lease_until"} {
		if _, err := raw.LookupErr(field); err == nil {
			t.Errorf("a refused verb wrote %s back onto the stripped card", field)
		}
	}
	if got := f.get("c1"); !got.UpdatedAt.Equal(stripped.UpdatedAt) || got.State != stripped.State || got.LastRunID != "run-1" {
		t.Errorf("refused verbs changed the card: %+v, was %+v", got, stripped)
	}

	// The un-leased arm lists it only once it is older than the horizon.
	horizon := mongostore.DefaultUnleasedHorizon
	early, err := boardtest.PageCards(f.s.ListExpiredClaimCandidates(f.ctx, board.ListExpiredClaimCandidatesParams{Cutoff: updated.Add(horizon - time.Second), Limit: 10}))
	if err != nil || len(early) != 0 {
		t.Errorf("candidates before the horizon = %v, %v; want none", ids(early), err)
	}
	cutoff := updated.Add(horizon)
	late, err := boardtest.PageCards(f.s.ListExpiredClaimCandidates(f.ctx, board.ListExpiredClaimCandidatesParams{Cutoff: cutoff, Limit: 10}))
	if err != nil || !slices.Equal(ids(late), []string{"c1"}) {
		t.Fatalf("candidates at the horizon = %v, %v; want [c1]", ids(late), err)
	}
	if c := late[0]; !c.Legacy() || c.ClaimEpoch != 0 || c.Claim != workerA {
		t.Errorf("listed card = %+v, want the un-leased claim of %s with no epoch", c, workerA)
	}
	running, err := f.s.ListUnleasedRunningClaims(f.ctx, board.ListUnleasedRunningClaimsParams{Cutoff: updated, Limit: 10})
	if err != nil || !slices.Equal(ids(running), []string{"c1"}) {
		t.Errorf("ListUnleasedRunningClaims = %v, %v; want [c1]", ids(running), err)
	}

	// It is transferable by naming the missing epoch as 0; the new fence is
	// floored at the server clock, so it is above the lost one.
	observed, err := f.s.ReclaimExpired(f.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: board.ClaimToken{Marker: workerA}, RecoveryMarker: reaperR, Cutoff: cutoff, Lease: testTerm})
	rec := observed.Token()
	if err != nil {
		t.Fatalf("ReclaimExpired of the stripped claim: %v", err)
	}
	if stored := f.get("c1").Token(); rec.Marker != reaperR || rec.Epoch <= tok.Epoch || stored != rec {
		t.Errorf("transfer = %+v (stored %+v), want %s above epoch %d", rec, stored, reaperR, tok.Epoch)
	}
	wantConflict(t, f.s.SetLastRunOwned(f.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: "run-3"}), reaperR, rec.Epoch, "the old holder after the transfer")
}

// TestStrippedClaimTransferNeedsTheHorizon: before the horizon the same
// transfer is a conflict, and a live leased claim cannot be taken by
// naming epoch 0.
func TestStrippedClaimTransferNeedsTheHorizon(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{UnleasedHorizon: time.Hour})
	f.create("stripped", board.StateInProgress)
	f.create("live", board.StateInProgress)
	f.claim("stripped", workerA)
	live := f.claim("live", workerB)
	updated := f.serverNow()
	f.strip("stripped", updated)

	_, err := f.s.ReclaimExpired(f.ctx, board.ReclaimExpiredParams{Card: "stripped", Prev: board.ClaimToken{Marker: workerA}, RecoveryMarker: reaperR, Cutoff: updated.Add(59 * time.Minute), Lease: testTerm})
	wantConflict(t, err, workerA, 0, "transfer of an un-leased claim before the horizon")
	_, err = f.s.ReclaimExpired(f.ctx, board.ReclaimExpiredParams{Card: "live", Prev: board.ClaimToken{Marker: workerB}, RecoveryMarker: reaperR, Cutoff: updated.Add(48 * time.Hour), Lease: testTerm})
	wantConflict(t, err, workerB, live.Epoch, "transfer of a fenced claim naming epoch 0")
	if _, err := f.s.ReclaimExpired(f.ctx, board.ReclaimExpiredParams{Card: "stripped", Prev: board.ClaimToken{Marker: workerA}, RecoveryMarker: reaperR, Cutoff: updated.Add(time.Hour), Lease: testTerm}); err != nil {
		t.Errorf("transfer at the configured horizon: %v", err)
	}
	// Release by marker (the ungated sweep's tool) works on a stripped
	// claim too: it is not a fenced write.
	f.claim("live", workerB)
	f.strip("live", updated)
	if err := f.s.Release(f.ctx, board.ReleaseParams{Card: "live", Marker: workerB, Actor: "sweep"}); err != nil {
		t.Errorf("Release of a stripped claim: %v", err)
	}
	if c := f.get("live"); c.Claimed() {
		t.Errorf("card after Release = %+v, want free", c)
	}
}

// TestLeaseComesFromTheServerClock: DESIGN.md#epoch. An agent whose clock runs
// hours ahead (or behind) must not mint itself extra lease: claimed_at and
// the lease are the server's, and the round trip counts against the lease.
// A reading of the server's clock serves the writes of up to a second
// (DESIGN.md#twin-clock), aged by the agent's monotonic clock, so the stamps
// lie in [before - that second, after], never later.
func TestLeaseComesFromTheServerClock(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{5 * time.Hour, -5 * time.Hour} {
		t.Run(fmt.Sprintf("skew%s", skew), func(t *testing.T) {
			t.Parallel()
			agent := boardtest.NewManualClock(time.Now().Add(skew))
			f := openFleet(t, mongostore.Options{Clock: agent})
			f.create("c1", board.StateReady)

			before := f.serverNow().Add(-time.Second)
			tok := f.claim("c1", workerA)
			after := f.serverNow()
			c := f.get("c1")
			if c.ClaimedAt.Before(before) || c.ClaimedAt.After(after) {
				t.Errorf("claimed_at %s, want the server's time between %s and %s", c.ClaimedAt, before, after)
			}
			// The lease is measured from the upper bound of the server's
			// time: claimed_at (the reading) plus the reading's round
			// trip and drift, at least a millisecond and, on a loopback
			// server, far less than the second allowed here.
			if !c.ClaimLeaseUntil.After(c.ClaimedAt.Add(testTerm)) || c.ClaimLeaseUntil.After(c.ClaimedAt.Add(testTerm+time.Second)) {
				t.Errorf("lease %s, want after claimed_at %s + lease, by less than a second", c.ClaimLeaseUntil, c.ClaimedAt)
			}
			if c.UpdatedAt.Before(before) || c.UpdatedAt.After(after) {
				t.Errorf("updated_at %s, want the server's time", c.UpdatedAt)
			}
			if tok.Epoch < before.UnixMilli() || tok.Epoch > after.UnixMilli()+1 {
				t.Errorf("epoch %d, want the server's milliseconds between %d and %d", tok.Epoch, before.UnixMilli(), after.UnixMilli())
			}

			agent.Advance(time.Hour)
			res, err := f.s.RenewClaims(f.ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: "c1", Token: tok}}, Lease: testTerm})
			after = f.serverNow()
			if err != nil || res[0].Err != nil {
				t.Fatalf("RenewClaims = %+v, %v", res, err)
			}
			if l := res[0].LeaseUntil; l.After(after.Add(testTerm+time.Second)) || l.Before(c.ClaimLeaseUntil) {
				t.Errorf("renewed lease %s, want at most the server's %s + lease and a reading's round trip (the agent clock reads %s)", l, after, agent.Now())
			}

			if err := f.s.ExpireClaimOwned(f.ctx, board.OwnedParams{Card: "c1", Token: tok}); err != nil {
				t.Fatal(err)
			}
			expired := f.get("c1")
			if now := f.serverNow(); !expired.LeaseExpired(now) {
				t.Errorf("lease after ExpireClaimOwned = %s, want ended by the server's now %s", expired.ClaimLeaseUntil, now)
			}
		})
	}
}

// TestCorruptFieldIsATypedErrorNamingTheCard: a document another program
// wrote with a field of the wrong type fails with a *DocumentError naming
// the card and the field, from every verb that reads it, and nothing
// panics.
func TestCorruptFieldIsATypedErrorNamingTheCard(t *testing.T) {
	t.Parallel()
	cases := []struct {
		field string
		value any
	}{
		{"claim_epoch", "seven"},
		{"claim_epoch", 1.5},
		{"claim", int64(42)},
		{"claim_lease_until", "tomorrow"},
		{"labels", "not-an-array"},
		{"labels", bson.A{"ok", int64(3)}},
		{"state", bson.D{{Key: "nested", Value: true}}},
		{"awaiting_input", "yes"},
		{"gave_up", bson.D{{Key: "at", Value: "noon"}}},
		{"outbox", bson.A{"not-a-document"}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s=%v", tc.field, tc.value), func(t *testing.T) {
			t.Parallel()
			f := openFleet(t, mongostore.Options{})
			f.create("bad", board.StateReady)
			f.create("good", board.StateReady)
			f.foreign("bad", bson.D{{Key: "$set", Value: bson.D{{Key: tc.field, Value: tc.value}}}})

			check := func(what string, err error) {
				t.Helper()
				var de *mongostore.DocumentError
				if !errors.As(err, &de) || !errors.Is(err, mongostore.ErrCorruptDocument) {
					t.Errorf("%s: got %v, want a *DocumentError", what, err)
					return
				}
				if de.ID != "bad" || (de.Field != tc.field && !strings.HasPrefix(de.Field, tc.field+".")) {
					t.Errorf("%s: error names %s %q field %q, want card \"bad\" field %q", what, de.Collection, de.ID, de.Field, tc.field)
				}
			}
			_, err := f.s.GetCard(f.ctx, board.GetCardParams{ID: "bad"})
			check("GetCard", err)
			_, err = f.s.ListCards(f.ctx, board.ListCardsParams{})
			check("ListCards", err)
			_, err = f.s.Claim(f.ctx, board.ClaimParams{Card: "bad", Marker: workerA, Lease: testTerm})
			check("Claim", err)
			_, err = f.s.AdjustLabels(f.ctx, board.AdjustLabelsParams{Card: "bad", Add: []string{"x"}})
			check("AdjustLabels", err)
			if _, err := f.s.Events(f.ctx, board.EventsParams{After: 0, Limit: 0}); err != nil {
				t.Errorf("Events with a corrupt card on the board: %v, want the log still readable", err)
			}
			// The healthy card next to it is unaffected.
			if _, err := f.s.Claim(f.ctx, board.ClaimParams{Card: "good", Marker: workerA, Lease: testTerm}); err != nil {
				t.Errorf("Claim of a healthy card next to a corrupt one: %v", err)
			}
		})
	}
}

// legacyLabelEntry is an outbox entry as an older version pushed it: a
// labels event adding label to card, never stamped.
func legacyLabelEntry(id, card, label string, at time.Time) bson.D {
	return bson.D{
		{Key: "id", Value: id}, {Key: "type", Value: string(board.EventLabels)}, {Key: "card", Value: card},
		{Key: "actor", Value: "bot"}, {Key: "at", Value: at}, {Key: "data", Value: bson.D{{Key: "added", Value: bson.A{label}}}},
	}
}

// TestAnUnpublishedOutboxIsReadAndPublishedOnce: the state a writer that
// dies after its write leaves is a stamped outbox nobody published
// (DESIGN.md#event-log). Readers see its events at once, under the
// sequence numbers the stamp fixes; compactors racing publish each entry
// once and clear the outbox. An outbox an older version left unstamped
// is stamped and published in outbox order.
func TestAnUnpublishedOutboxIsReadAndPublishedOnce(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	f.create("c1", board.StateReady)
	// c1's last write stays pending: nobody writes c1 again.
	if _, err := f.s.AdjustLabels(f.ctx, board.AdjustLabelsParams{Card: "c1", Add: []string{"x"}, Actor: "bot"}); err != nil {
		t.Fatal(err)
	}
	before, err := f.s.Events(f.ctx, board.EventsParams{After: 0, Limit: 0})
	if err != nil {
		t.Fatal(err)
	}
	if n := f.count(f.raw.Collection("events"), bson.D{}); n != 1 {
		t.Fatalf("events collection holds %d events, want 1 (c1's creation, published by its next write)", n)
	}
	if len(before) != 2 || before[1].Type != board.EventLabels {
		t.Fatalf("Events = %+v, want c1's creation and its pending labels event", before)
	}
	// c2 as an older version left it: entries pushed, never stamped.
	var legacy bson.A
	for i := range 3 {
		legacy = append(legacy, legacyLabelEntry(fmt.Sprintf("crashed-%d", i), "c2", fmt.Sprintf("l%d", i), f.serverNow()))
	}
	now := f.serverNow()
	if _, err := f.cards.InsertOne(f.ctx, bson.D{
		{Key: "_id", Value: "c2"}, {Key: "title", Value: ""}, {Key: "state", Value: board.StateReady},
		{Key: "labels", Value: bson.A{}}, {Key: "depends_on", Value: bson.A{}}, {Key: "runs", Value: bson.A{}},
		{Key: "awaiting_input", Value: false}, {Key: "created_at", Value: now}, {Key: "updated_at", Value: now},
		{Key: "created_seq", Value: int64(7)}, {Key: "claim", Value: ""}, {Key: "outbox", Value: legacy},
	}); err != nil {
		t.Fatal(err)
	}
	// That version relayed crashed-0 as its event 1 and died before
	// popping it; and it left an outbox on an archived run.
	relayed := legacy[0].(bson.D)
	if _, err := f.raw.Collection("events").InsertOne(f.ctx, append(bson.D{{Key: "_id", Value: int64(1)}, {Key: "key", Value: "crashed-0"}}, relayed[1:]...)); err != nil {
		t.Fatal(err)
	}
	runEntry := legacyLabelEntry("crashed-run", "c2", "l3", now)
	if _, err := f.raw.Collection("runs").InsertOne(f.ctx, bson.D{{Key: "_id", Value: "old-run"}, {Key: "card", Value: "c2"}, {Key: "outbox", Value: bson.A{runEntry}}}); err != nil {
		t.Fatal(err)
	}

	// A pass as the agent's compactor makes it (outboxes 10 s old and
	// older): the archived run's outbox, which readers do not look at, is
	// published at once, not left stamped for a later pass to find after
	// readers have passed its stamp.
	if _, err := f.s.CompactEvents(f.ctx, f.serverNow().Add(-10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := f.count(f.raw.Collection("events"), bson.D{{Key: "key", Value: "crashed-run"}}); n != 1 {
		t.Errorf("the archived run's legacy entry is in the log %d times after a pass, want once", n)
	}

	other := openStore(t, mongostore.Options{URI: mongotest.URI(t), Database: f.raw.Name()})
	cutoff := f.serverNow().Add(time.Hour)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		s := f.s
		if i%2 == 1 {
			s = other
		}
		wg.Go(func() {
			_, err := s.CompactEvents(f.ctx, cutoff)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("CompactEvents: %v", err)
		}
	}
	all, err := f.s.Events(f.ctx, board.EventsParams{After: 0, Limit: 0})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 3 || all[0].Seq != 1 || !slices.EqualFunc(all[1:3], before, func(a, b board.Event) bool { return a.Seq == b.Seq && a.Type == b.Type && a.Card == b.Card }) {
		t.Fatalf("after compaction the log is %+v, want the relayed legacy event 1, then what readers were shown before: %+v", all, before)
	}
	var got []string
	for _, ev := range append(all[:1:1], all[3:]...) {
		got = append(got, ev.Data.Added...)
	}
	if want := []string{"l0", "l1", "l2", "l3"}; !slices.Equal(got, want) {
		t.Errorf("legacy entries in the log: %q, want each once, in outbox order: %q", got, want)
	}
	if n := f.count(f.raw.Collection("runs"), bson.D{{Key: "outbox.0", Value: bson.D{{Key: "$exists", Value: true}}}}); n != 0 {
		t.Errorf("%d runs still hold an outbox after compaction", n)
	}
	if n := f.count(f.raw.Collection("events"), bson.D{}); n != len(all) {
		t.Errorf("events collection holds %d events, want all %d published", n, len(all))
	}
	if n := f.count(f.cards, bson.D{{Key: "outbox.0", Value: bson.D{{Key: "$exists", Value: true}}}}); n != 0 {
		t.Errorf("%d cards still hold an outbox after compaction", n)
	}
}

// TestACollidingSequenceNumberIsAnError: two events given one sequence
// number (a server whose stamps are not unique) fail the read and the
// publish that meet them, instead of one event passing for the other and
// being dropped (DESIGN.md#event-log).
func TestACollidingSequenceNumberIsAnError(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	f.create("c1", board.StateReady)
	evs, err := f.s.Events(f.ctx, board.EventsParams{After: 0, Limit: 0})
	if err != nil || len(evs) != 1 {
		t.Fatalf("Events = %+v, %v; want the creation", evs, err)
	}
	// Another event already sits under the pending creation's number.
	if _, err := f.raw.Collection("events").InsertOne(f.ctx, bson.D{
		{Key: "_id", Value: evs[0].Seq}, {Key: "key", Value: "someone-else"}, {Key: "type", Value: string(board.EventLabels)},
		{Key: "card", Value: "c9"}, {Key: "at", Value: f.serverNow()}, {Key: "data", Value: bson.D{}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Events(f.ctx, board.EventsParams{After: 0, Limit: 0}); !errors.Is(err, mongostore.ErrStampCollision) {
		t.Errorf("Events over a collision: %v, want ErrStampCollision", err)
	}
	if _, err := f.s.CompactEvents(f.ctx, f.serverNow().Add(time.Hour)); !errors.Is(err, mongostore.ErrStampCollision) {
		t.Errorf("CompactEvents over a collision: %v, want ErrStampCollision", err)
	}
	if n := f.count(f.cards, bson.D{{Key: "outbox.0", Value: bson.D{{Key: "$exists", Value: true}}}}); n != 1 {
		t.Errorf("the colliding outbox was cleared (%d pending), want it kept", n)
	}
}

// TestTailingReaderNeverSkipsAnEvent: writers on several agents append
// events while a reader tails the log by sequence. Every event must reach
// the reader exactly once, each card's in the order they were written:
// no event becomes visible below a sequence number a reader has passed.
func TestTailingReaderNeverSkipsAnEvent(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	other := openStore(t, mongostore.Options{URI: mongotest.URI(t), Database: f.raw.Name()})
	const writers, perWriter = 4, 10
	for i := range writers {
		f.create(fmt.Sprintf("c%d", i), board.StateReady)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		s := f.s
		if i%2 == 1 {
			s = other
		}
		wg.Go(func() {
			for j := range perWriter {
				if _, err := s.AdjustLabels(f.ctx, board.AdjustLabelsParams{Card: fmt.Sprintf("c%d", i), Add: []string{fmt.Sprintf("l%d", j)}, Actor: "bot"}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()

	var seen []board.Event
	after := int64(0)
	tail := func() {
		page, err := other.Events(f.ctx, board.EventsParams{After: after, Limit: 7})
		if err != nil {
			t.Fatalf("Events: %v", err)
		}
		for _, ev := range page {
			if ev.Seq <= after {
				t.Fatalf("tail read seq %d after %d", ev.Seq, after)
			}
			after = ev.Seq
			seen = append(seen, ev)
		}
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		tail()
	}
	close(errs)
	for err := range errs {
		t.Fatalf("AdjustLabels: %v", err)
	}
	// Readers see the log up to EventLag behind the server's clock
	// (DESIGN.md#event-log): a page with nothing new does not say the
	// writes are all in. A barrier card created now does: once its
	// creation is read, the horizon has passed every earlier write.
	f.create("barrier", board.StateReady)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for deadline := time.Now().Add(time.Minute); len(seen) == 0 || seen[len(seen)-1].Card != "barrier"; <-poll.C {
		if time.Now().After(deadline) {
			t.Fatalf("the barrier card's creation was not read within a minute; the tail read %d events", len(seen))
		}
		tail()
	}
	all, err := f.s.Events(f.ctx, board.EventsParams{After: 0, Limit: 0})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(seen), len(all); got != want {
		t.Errorf("the tailing reader saw %d events, the log holds %d", got, want)
	}
	if got, want := len(all), writers+writers*perWriter+1; got != want {
		t.Errorf("log holds %d events, want %d (creations, label adds and the barrier)", got, want)
	}
	if !slices.EqualFunc(seen, all, func(a, b board.Event) bool { return a.Seq == b.Seq }) {
		t.Errorf("the tailing reader saw another sequence than the log holds")
	}
	perCard := map[string][]string{}
	for _, ev := range all {
		perCard[ev.Card] = append(perCard[ev.Card], ev.Data.Added...)
	}
	for i := range writers {
		card := fmt.Sprintf("c%d", i)
		var want []string
		for j := range perWriter {
			want = append(want, fmt.Sprintf("l%d", j))
		}
		if got := perCard[card]; !slices.Equal(got, want) {
			t.Errorf("%s's label events in log order %q, want %q", card, got, want)
		}
	}
}

// TestRenewalsOfATickAreChunkedBulkWrites: the heartbeat's tick is one
// update command per chunk of at most mongostore.RenewChunk holds, never
// more statements to a command: the MongoDB-wire test server (FerretDB)
// hangs for every client on an update of 100 statements or more
// (DESIGN.md#twin-writes). Every hold is renewed.
func TestRenewalsOfATickAreChunkedBulkWrites(t *testing.T) {
	t.Parallel()
	var (
		mu          sync.Mutex
		statements  []int
		projections []string
		counted     bool
	)
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		mu.Lock()
		defer mu.Unlock()
		if counted && e.CommandName == "find" {
			projections = append(projections, e.Command.Lookup("projection").String())
		}
		if !counted || e.CommandName != "update" {
			return
		}
		n := 0
		if arr, ok := e.Command.Lookup("updates").ArrayOK(); ok {
			vals, _ := arr.Values()
			n = len(vals)
		}
		statements = append(statements, n)
	}}
	f := openFleet(t, mongostore.Options{Monitor: mon})
	const n = 150
	var holds []board.Hold
	for i := range n {
		id := fmt.Sprintf("c%03d", i)
		f.create(id, board.StateReady)
		holds = append(holds, board.Hold{Card: id, Token: f.claim(id, workerA)})
	}
	mu.Lock()
	counted = true
	mu.Unlock()
	ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	res, err := f.s.RenewClaims(ctx, board.RenewClaimsParams{Holds: holds, Lease: testTerm})
	mu.Lock()
	counted = false
	got := slices.Clone(statements)
	reads := slices.Clone(projections)
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	// The read-back asks for what the tick needs, not whole cards.
	for _, p := range reads {
		if !strings.Contains(p, "claim_lease_until") || strings.Contains(p, "outbox") {
			t.Errorf("a read-back's projection is %s, want the claim, its epoch and lease only", p)
		}
	}
	if len(reads) == 0 {
		t.Error("no read-back was sent")
	}
	renewed := 0
	for _, r := range res {
		if r.Err != nil {
			t.Errorf("renew %s: %v", r.Card, r.Err)
			continue
		}
		renewed++
	}
	if renewed != n {
		t.Errorf("renewed %d of %d holds", renewed, n)
	}
	want := (n + mongostore.RenewChunk - 1) / mongostore.RenewChunk
	if len(got) != want {
		t.Errorf("RenewClaims of %d holds sent %d update commands %v, want %d", n, len(got), got, want)
	}
	for _, k := range got {
		if k > mongostore.RenewChunk {
			t.Errorf("an update command carried %d statements, want at most %d", k, mongostore.RenewChunk)
		}
	}
}

// TestUnleasedArmsSelectInTheQuery pins both un-leased listings: the
// selection and the cap are in the query, so older conserved cards cannot
// starve the batch, and the candidate listing shares the batch between
// its arms.
func TestUnleasedArmsSelectInTheQuery(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	now := f.serverNow()
	old := now.Add(-72 * time.Hour)
	mk := func(id, state string, withRun bool, updated time.Time) {
		f.create(id, state)
		tok := f.claim(id, workerA)
		if withRun {
			if err := f.s.SetLastRunOwned(f.ctx, board.SetLastRunOwnedParams{Card: id, Token: tok, RunID: "run-" + id}); err != nil {
				t.Fatal(err)
			}
		}
		f.strip(id, updated)
	}
	// Conserved shapes, oldest of all: no run recorded, or outside the
	// running column.
	for i := range 3 {
		mk(fmt.Sprintf("norun%d", i), board.StateInProgress, false, old.Add(time.Duration(i)*time.Second))
		mk(fmt.Sprintf("ready%d", i), board.StateReady, true, old.Add(time.Duration(i)*time.Second))
	}
	mk("match1", board.StateInProgress, true, old.Add(time.Minute))
	mk("match2", board.StateInProgress, true, old.Add(2*time.Minute))
	mk("recent", board.StateInProgress, true, now)

	got, err := f.s.ListUnleasedRunningClaims(f.ctx, board.ListUnleasedRunningClaimsParams{Cutoff: now.Add(-time.Hour), Limit: 1})
	if err != nil || !slices.Equal(ids(got), []string{"match1"}) {
		t.Errorf("ListUnleasedRunningClaims limit 1 = %v, %v; want [match1]", ids(got), err)
	}
	got, err = f.s.ListUnleasedRunningClaims(f.ctx, board.ListUnleasedRunningClaimsParams{Cutoff: now.Add(-time.Hour), Limit: 10})
	if err != nil || !slices.Equal(ids(got), []string{"match1", "match2"}) {
		t.Errorf("ListUnleasedRunningClaims = %v, %v; want [match1 match2]", ids(got), err)
	}

	// Leased, expired candidates compete with the 8 old un-leased ones.
	for i := range 3 {
		id := fmt.Sprintf("leased%d", i)
		f.create(id, board.StateInProgress)
		tok := f.claim(id, workerB)
		if err := f.s.ExpireClaimOwned(f.ctx, board.OwnedParams{Card: id, Token: tok}); err != nil {
			t.Fatal(err)
		}
	}
	cands, err := boardtest.PageCards(f.s.ListExpiredClaimCandidates(f.ctx, board.ListExpiredClaimCandidatesParams{Cutoff: f.serverNow(), Limit: 4}))
	if err != nil {
		t.Fatal(err)
	}
	var leased, unleased int
	for _, c := range cands {
		if c.Legacy() {
			unleased++
		} else {
			leased++
		}
	}
	if len(cands) != 4 || leased != 2 || unleased != 2 {
		t.Errorf("candidates with limit 4 = %v (%d leased, %d un-leased), want 2 of each arm", ids(cands), leased, unleased)
	}
	if !slices.IsSortedFunc(cands, func(a, b board.Card) int { return a.ClaimLeaseUntil.Compare(b.ClaimLeaseUntil) }) {
		t.Errorf("candidates %v not in lease order (no lease first)", ids(cands))
	}
}

func TestOpenValidatesOptions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		opts mongostore.Options
	}{
		{"HorizonBelowOneLease", mongostore.Options{Lease: time.Minute, UnleasedHorizon: 59 * time.Second}},
		{"HorizonBelowDefaultLease", mongostore.Options{UnleasedHorizon: 10 * time.Second}},
		{"NoDatabase", mongostore.Options{Database: "-"}},
		{"BadBoard", mongostore.Options{Board: board.Board{States: []board.State{{Name: "only"}}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := tc.opts
			opts.URI = mongotest.URI(t)
			if opts.Database == "-" {
				opts.Database = ""
			} else {
				opts.Database = "unused"
			}
			s, err := mongostore.Open(t.Context(), opts)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%+v) = nil error, want a configuration error", tc.opts)
			}
			if !errors.Is(err, board.ErrInvalidArgument) {
				t.Errorf("Open: %v, want ErrInvalidArgument", err)
			}
		})
	}
}

func TestOpenCreatesIndexes(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	specs, err := f.cards.Indexes().ListSpecifications(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	for _, want := range []string{"claim_lease_until_id", "state_claim_created_id", "unleased_claim_updated_id", "unleased_state_updated_id"} {
		if !slices.Contains(names, want) {
			t.Errorf("cards indexes = %q, want %q among them", names, want)
		}
	}
}

// TestOpenOnAnOlderDatabaseKeepsItsIndexes: DESIGN.md#fleet-indexes. A
// database an older version indexed opens: the catalogue's indexes are
// added, and the older ones are left in place for the older agents of
// the fleet that may still use them.
func TestOpenOnAnOlderDatabaseKeepsItsIndexes(t *testing.T) {
	t.Parallel()
	db := mongotest.Database(t)
	cards := mongotest.Client(t).Database(db).Collection("cards")
	older := []string{"claim_lease_until", "state_created", "created", "updated_at", "depends_on"}
	keys := map[string]bson.D{
		"claim_lease_until": {{Key: "claim_lease_until", Value: 1}},
		"state_created":     {{Key: "state", Value: 1}, {Key: "created_seq", Value: 1}},
		"created":           {{Key: "created_seq", Value: 1}},
		"updated_at":        {{Key: "updated_at", Value: 1}},
		"depends_on":        {{Key: "depends_on", Value: 1}},
	}
	var models []mongo.IndexModel
	for _, name := range older {
		models = append(models, mongo.IndexModel{Keys: keys[name], Options: options.Index().SetName(name)})
	}
	if _, err := cards.Indexes().CreateMany(t.Context(), models); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, mongostore.Options{Database: db})
	if _, err := s.CreateCard(t.Context(), board.CreateCardParams{ID: "c1", State: board.StateReady, Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	specs, err := cards.Indexes().ListSpecifications(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sp := range specs {
		names = append(names, sp.Name)
	}
	for name := range mongostore.CardIndexes() {
		older = append(older, name)
	}
	for _, want := range older {
		if !slices.Contains(names, want) {
			t.Errorf("cards indexes after Open = %q, want %q among them", names, want)
		}
	}
}

func ids(cs []board.Card) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

// TestRecoveryOnlyFindsStrippedRecoveryClaims: a foreign write may strip a
// recovery claim of its lease and fence (DESIGN.md#recovery-sweep). The recovery
// listing selects by marker alone, so the sweep still finds it, while a
// worker's stripped claim next to it stays out.
func TestRecoveryOnlyFindsStrippedRecoveryClaims(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	for _, id := range []string{"worker", "recovery", "stripped-worker", "stripped-recovery"} {
		f.create(id, board.StateInProgress)
	}
	for _, id := range []string{"worker", "stripped-worker"} {
		f.claim(id, workerA)
	}
	for _, id := range []string{"recovery", "stripped-recovery"} {
		tok := f.claim(id, workerA)
		if err := f.s.ExpireClaimOwned(f.ctx, board.OwnedParams{Card: id, Token: tok}); err != nil {
			t.Fatal(err)
		}
		c := f.get(id)
		if _, err := f.s.ReclaimExpired(f.ctx, board.ReclaimExpiredParams{Card: id, Prev: tok, RecoveryMarker: reaperR, Cutoff: c.ClaimLeaseUntil, Lease: testTerm}); err != nil {
			t.Fatalf("ReclaimExpired %s: %v", id, err)
		}
	}
	now := f.serverNow()
	f.strip("stripped-worker", now)
	f.strip("stripped-recovery", now)
	if c := f.get("stripped-recovery"); !c.Legacy() || !board.IsRecoveryMarker(c.Claim) {
		t.Fatalf("stripped-recovery = %+v, want a recovery claim with no lease", c)
	}

	got, err := f.s.ListCards(f.ctx, board.ListCardsParams{RecoveryOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"recovery", "stripped-recovery"}; !slices.Equal(ids(got), want) {
		t.Errorf("ListCards(RecoveryOnly) = %v, want %v", ids(got), want)
	}
}

// TestRecoveryOnlyIsAnIndexRange: on a real MongoDB the filter the
// recovery listing sends is served from the claim index (an anchored prefix
// is a key range), never a collection scan. FerretDB v1 evaluates the same
// filter but has no plan to show, so this runs only where
// LEASEKEEPER_TEST_MONGO_URI names a server.
func TestRecoveryOnlyIsAnIndexRange(t *testing.T) {
	t.Parallel()
	if os.Getenv(mongotest.EnvURI) == "" {
		t.Skip("the query plan is a real MongoDB's; set " + mongotest.EnvURI)
	}
	var (
		mu     sync.Mutex
		filter bson.Raw
	)
	f := openFleet(t, mongostore.Options{Monitor: &event.CommandMonitor{
		Started: func(_ context.Context, ev *event.CommandStartedEvent) {
			if ev.CommandName != "find" {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			filter, _ = ev.Command.Lookup("filter").DocumentOK()
			filter = slices.Clone(filter)
		},
	}})
	// Free cards around it, as a fleet's collection holds: on a near-empty
	// one a full scan of the creation-order index (no sort to do) could
	// tie with the claim range.
	for i := range 50 {
		f.create(fmt.Sprintf("done%02d", i), board.StateDone)
	}
	f.create("c1", board.StateInProgress)
	if _, err := f.s.ListCards(f.ctx, board.ListCardsParams{RecoveryOnly: true}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	sent := filter
	mu.Unlock()
	if sent == nil {
		t.Fatal("the recovery listing sent no find")
	}
	var plan bson.M
	err := f.raw.RunCommand(f.ctx, bson.D{
		{Key: "explain", Value: bson.D{{Key: "find", Value: "cards"}, {Key: "filter", Value: sent}}},
		{Key: "verbosity", Value: "queryPlanner"},
	}).Decode(&plan)
	if err != nil {
		t.Fatal(err)
	}
	stages := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case bson.M:
			if s, ok := v["stage"].(string); ok {
				stages[s] = true
				if s == "IXSCAN" && v["indexName"] != "claim" {
					t.Errorf("index scan of %v, want the claim index", v["indexName"])
				}
			}
			for _, x := range v {
				walk(x)
			}
		case bson.D:
			// Nested documents may decode as bson.D or bson.M, depending
			// on the driver's defaults: take both.
			m := bson.M{}
			for _, e := range v {
				m[e.Key] = e.Value
			}
			walk(m)
		case bson.A:
			for _, x := range v {
				walk(x)
			}
		}
	}
	// The winning plan only: a rejected plan may scan another index (one
	// that gives the creation order, say) and is not what the server runs.
	var winning any
	switch qp := plan["queryPlanner"].(type) {
	case bson.M:
		winning = qp["winningPlan"]
	case bson.D:
		for _, e := range qp {
			if e.Key == "winningPlan" {
				winning = e.Value
			}
		}
	}
	walk(winning)
	if !stages["IXSCAN"] || stages["COLLSCAN"] {
		t.Errorf("plan of %s: stages %v, want an IXSCAN of the claim index and no COLLSCAN", sent, stages)
	}
}

// A claim whose epoch a foreign writer set to null reads as "no epoch",
// and must be transferable by the token that names no epoch, as a missing
// field is: otherwise the watchdog lists it every pass and can never take
// it. It refuses every fenced write, like a missing epoch.
func TestNullEpochIsTransferableLikeAMissingOne(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{UnleasedHorizon: time.Hour})
	f.create("c1", board.StateInProgress)
	tok := f.claim("c1", workerA)
	f.foreign("c1", bson.D{{Key: "$set", Value: bson.D{{Key: "claim_epoch", Value: nil}}}})
	if err := f.s.SetLastRunOwned(f.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: "r1"}); !errors.Is(err, board.ErrClaimConflict) {
		t.Errorf("a fenced write on a null epoch = %v, want ErrClaimConflict", err)
	}
	lease := f.get("c1").ClaimLeaseUntil
	card, err := f.s.ReclaimExpired(f.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: board.ClaimToken{Marker: workerA}, RecoveryMarker: reaperR, Cutoff: lease.Add(time.Second), Lease: testTerm})
	newTok := card.Token()
	if err != nil {
		t.Fatalf("transfer of an expired claim with a null epoch: %v", err)
	}
	if newTok.Epoch <= tok.Epoch {
		t.Errorf("transfer epoch %d, want above the lost %d", newTok.Epoch, tok.Epoch)
	}
	if c := f.get("c1"); c.Token() != newTok {
		t.Errorf("after the transfer the card holds %+v, want %+v", c.Token(), newTok)
	}
}

// TestEventsStopAtTheHorizon: with an event lag, readers see an event only
// once the server's clock has passed its stamp by the lag
// (DESIGN.md#event-log), so a write stamped earlier but committed later
// cannot land below a sequence number a reader has passed.
func TestEventsStopAtTheHorizon(t *testing.T) {
	t.Parallel()
	const lag = 1500 * time.Millisecond
	f := openFleet(t, mongostore.Options{EventLag: lag})
	f.create("c1", board.StateReady)
	written := f.serverNow()
	if evs, err := f.s.Events(f.ctx, board.EventsParams{After: 0, Limit: 0}); err != nil || len(evs) != 0 {
		t.Fatalf("Events right after the write = %+v, %v; want nothing before the horizon", evs, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		evs, err := f.s.Events(f.ctx, board.EventsParams{After: 0, Limit: 0})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 1 {
			if now := f.serverNow(); now.Before(written.Add(lag)) {
				t.Errorf("event shown at server time %s, before its write (%s) + the lag", now, written)
			}
			return
		}
		if len(evs) > 1 || time.Now().After(deadline) {
			t.Fatalf("Events = %+v; want the one creation once the horizon passes it", evs)
		}
		// Poll the condition: the horizon moves with the server's clock.
		select {
		case <-f.ctx.Done():
			t.Fatal(f.ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestOneClockReadingServesASecondOfWrites: writes in quick succession
// share one reading of the server's clock instead of a hello each
// (DESIGN.md#twin-clock).
func TestOneClockReadingServesASecondOfWrites(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		hellos int
	)
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "hello" {
			mu.Lock()
			hellos++
			mu.Unlock()
		}
	}}
	f := openFleet(t, mongostore.Options{Monitor: mon})
	f.create("c1", board.StateReady)
	mu.Lock()
	hellos = 0
	mu.Unlock()
	start := time.Now()
	const writes = 6
	for i := range writes {
		if _, err := f.s.AdjustLabels(f.ctx, board.AdjustLabelsParams{Card: "c1", Add: []string{fmt.Sprintf("l%d", i)}, Actor: "bot"}); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	// One reading per started second of writing, and one more for a
	// reading that expired just as the writes began.
	if limit := int(took/time.Second) + 2; hellos > limit {
		t.Errorf("%d writes in %s sent %d hello commands, want at most %d", writes, took, hellos, limit)
	}
}

// TestEventsPagePastOutboxesWithNothingToShow: pending documents whose
// outbox holds no event (emptied, or corrupt) must not take the places of
// a page's events: a page of one still returns the oldest pending event,
// not a later published one, and paging by one walks the whole log in
// order (DESIGN.md#event-log).
func TestEventsPagePastOutboxesWithNothingToShow(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	f.create("e1", board.StateReady)
	f.create("e2", board.StateReady)
	f.foreign("e1", bson.D{{Key: "$set", Value: bson.D{{Key: "outbox", Value: bson.A{}}}}})
	f.foreign("e2", bson.D{{Key: "$set", Value: bson.D{{Key: "outbox", Value: "not-an-array"}}}})
	f.create("c1", board.StateReady)
	f.create("c2", board.StateReady)
	// c2's next write publishes its creation; c1's stays pending.
	if _, err := f.s.AdjustLabels(f.ctx, board.AdjustLabelsParams{Card: "c2", Add: []string{"x"}, Actor: "bot"}); err != nil {
		t.Fatal(err)
	}
	first, err := f.s.Events(f.ctx, board.EventsParams{After: 0, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 1 || first[0].Card != "c1" || first[0].Type != board.EventCardCreated {
		t.Fatalf("first page of one = %+v, want c1's pending creation", first)
	}
	var walked []string
	for after := int64(0); ; {
		page, err := f.s.Events(f.ctx, board.EventsParams{After: after, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		walked = append(walked, page[0].Card+" "+string(page[0].Type))
		after = page[0].Seq
	}
	if want := []string{"c1 card_created", "c2 card_created", "c2 labels"}; !slices.Equal(walked, want) {
		t.Errorf("paging by one walked %q, want %q", walked, want)
	}
}

// TestALongLegacyOutboxIsPublishedInOrder: an older version left more
// events in one outbox than one write may carry (it relayed them one by
// one): they are published in steps, all of them, once each, in order,
// and the card takes writes again (DESIGN.md#event-log).
func TestALongLegacyOutboxIsPublishedInOrder(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	f.create("c1", board.StateReady)
	if _, err := f.s.CompactEvents(f.ctx, f.serverNow().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	const n = 75
	var legacy bson.A
	var want []string
	for i := range n {
		label := fmt.Sprintf("l%02d", i)
		want = append(want, label)
		legacy = append(legacy, legacyLabelEntry(fmt.Sprintf("old-%02d", i), "c1", label, f.serverNow()))
	}
	f.foreign("c1", bson.D{{Key: "$set", Value: bson.D{{Key: "outbox", Value: legacy}}}})
	// The card's next write publishes what it finds first.
	if _, err := f.s.AdjustLabels(f.ctx, board.AdjustLabelsParams{Card: "c1", Add: []string{"new"}, Actor: "bot"}); err != nil {
		t.Fatalf("a write to a card with a long legacy outbox: %v", err)
	}
	all, err := f.s.Events(f.ctx, board.EventsParams{After: 0, Limit: 0})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range all {
		got = append(got, ev.Data.Added...)
	}
	if want := append(want, "new"); !slices.Equal(got, want) {
		t.Errorf("labels in the log: %q, want the %d legacy ones once each in order, then the new write's", got, n)
	}
}
