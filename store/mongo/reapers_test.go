package mongostore_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

// TestReapersShareTheExpiredClaims: DESIGN.md#reaper-shares. Three agents'
// reapers, each on its own store, split the expired claims: every claim is
// listed to exactly one of them (a claim with no share key to all), a reaper
// that leaves or stops passing has its share taken over at the next pass,
// and a long-gone reaper's document is deleted.
func TestReapersShareTheExpiredClaims(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	reapers := []string{"host-a-11", "host-b-22", "host-c-33"}
	stores := map[string]*mongostore.Store{reapers[0]: f.s}
	for _, r := range reapers[1:] {
		stores[r] = openStore(t, mongostore.Options{URI: mongotest.URI(t), Database: f.raw.Name()})
	}
	all := f.expiredClaims(30)
	// One claim has no share key (an older release took it, or a foreign
	// write dropped it): no reaper can know whose share it is, so it is
	// everyone's.
	f.foreign("exp07", bson.D{{Key: "$unset", Value: bson.D{{Key: "claim_share_key", Value: ""}}}})

	list := func(r string) ([]string, int) {
		t.Helper()
		p := listShare(t, stores[r], f.serverNow(), r)
		var got []string
		for _, c := range p.Cards {
			got = append(got, c.ID)
			if p.Reapers > 1 && c.ID != "exp07" && board.ShareKey(c.ID)%int64(p.Reapers) != int64(p.ShareIndex) {
				t.Errorf("%s's share %d of %d lists %s, whose key says share %d", r, p.ShareIndex, p.Reapers, c.ID, board.ShareKey(c.ID)%int64(p.Reapers))
			}
		}
		return got, p.Reapers
	}
	// pass has each live reaper list its share once, and checks the
	// shares cover the expired claims, each once but the one with no
	// share key.
	pass := func(live ...string) {
		t.Helper()
		seen := map[string][]string{}
		for _, r := range live {
			got, n := list(r)
			if n != len(live) {
				t.Errorf("%s: the listing says %d reapers share it, want %d", r, n, len(live))
			}
			if len(got) < 2 {
				t.Errorf("%s's share of %d claims among %d reapers is %q", r, len(all), len(live), got)
			}
			for _, id := range got {
				seen[id] = append(seen[id], r)
			}
		}
		if got := slices.Sorted(maps.Keys(seen)); !slices.Equal(got, all) {
			t.Errorf("the shares of %q list %q, want every expired claim %q", live, got, all)
		}
		for id, by := range seen {
			want := 1
			if id == "exp07" {
				want = len(live)
			}
			if len(by) != want {
				t.Errorf("claim %s is listed to %q, want %d reaper(s)", id, by, want)
			}
		}
	}

	// The first round records each reaper. The first, alone, is given
	// every claim; each later one sees the reapers recorded before it.
	for i, r := range reapers {
		got, n := list(r)
		if n != i+1 || (i == 0 && len(got) != len(all)) {
			t.Fatalf("%s's first listing: %d claims shared by %d reapers", r, len(got), n)
		}
	}
	pass(reapers...)

	// A reaper that stops cleanly leaves at once.
	if err := stores[reapers[2]].Close(); err != nil {
		t.Fatal(err)
	}
	pass(reapers[:2]...)

	// A reaper whose until has passed is not live: it crashed, or stopped
	// passing. One gone for over an hour is deleted by the next listing.
	now := f.serverNow()
	reaperDocs := f.raw.Collection("reapers")
	if _, err := reaperDocs.InsertMany(f.ctx, []bson.D{
		{{Key: "_id", Value: "host-d-44"}, {Key: "until", Value: now.Add(-time.Second)}},
		{{Key: "_id", Value: "host-e-55"}, {Key: "until", Value: now.Add(-2 * time.Hour)}},
	}); err != nil {
		t.Fatal(err)
	}
	pass(reapers[:2]...)
	if n := f.count(reaperDocs, bson.D{{Key: "_id", Value: "host-e-55"}}); n != 0 {
		t.Errorf("a reaper gone for two hours is still recorded")
	}
	if n := f.count(reaperDocs, bson.D{{Key: "_id", Value: "host-d-44"}}); n != 1 {
		t.Errorf("a reaper gone for a second was deleted: only one gone for over an hour may be")
	}

	// A listing without a share is everything, and records no reaper.
	p, err := f.s.ListExpiredClaimCandidates(f.ctx, board.ListExpiredClaimCandidatesParams{Cutoff: f.serverNow()})
	if err != nil || len(p.Cards) != len(all) || p.Reapers != 0 {
		t.Errorf("a listing with no share = %d cards, %d reapers, %v; want all %d, 0", len(p.Cards), p.Reapers, err, len(all))
	}
}

// TestReaperSharesListAClaimWithAForeignShareKey: DESIGN.md#reaper-shares.
// A claim whose share key a foreign write left as something no share's
// $mod can match — a string, a negative number, a boolean — is no more
// known to be anyone's than a claim with no key: it must be in every
// share, or no reaper ever lists it while more than one is live, and the
// card is stranded.
func TestReaperSharesListAClaimWithAForeignShareKey(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	reapers := []string{"host-a-11", "host-b-22", "host-c-33"}
	stores := map[string]*mongostore.Store{reapers[0]: f.s}
	for _, r := range reapers[1:] {
		stores[r] = openStore(t, mongostore.Options{URI: mongotest.URI(t), Database: f.raw.Name()})
	}
	foreign := map[string]any{
		"key-string":   "12",
		"key-negative": int64(-7),
		"key-int32neg": int32(-2147483000),
		"key-bool":     true,
		"key-object":   bson.D{{Key: "k", Value: 1}},
		"key-half":     5.5,
		"key-huge":     float64(1 << 62),
	}
	for id, v := range foreign {
		f.expiredClaim(id)
		f.foreign(id, bson.D{{Key: "$set", Value: bson.D{{Key: "claim_share_key", Value: v}}}})
	}
	// Every reaper records itself first, so each listing below is shared
	// three ways.
	list := func(r string) board.ListExpiredClaimCandidatesResult {
		return listShare(t, stores[r], f.serverNow(), r)
	}
	for _, r := range reapers {
		list(r)
	}
	seen := map[string]int{}
	for _, r := range reapers {
		p := list(r)
		if p.Reapers != len(reapers) {
			t.Fatalf("%s: %d reapers share the listing, want %d", r, p.Reapers, len(reapers))
		}
		for _, c := range p.Cards {
			seen[c.ID]++
		}
	}
	for _, id := range slices.Sorted(maps.Keys(foreign)) {
		if seen[id] == 0 {
			t.Errorf("claim %s (share key %v written by a foreign program) is in no reaper's share: stranded", id, foreign[id])
		}
	}
}

// TestReaperSharesSurviveAForeignReaperRecord: DESIGN.md#reaper-shares.
// The reapers collection is read whole by every reaper's every pass, so a
// document there that is not a reaper's record — an operator's insert with
// a generated _id, an until that is not a date — must not fail the
// listing: it would stop every reaper of the fleet at once, for as long as
// the document stays. Such a document is no live reaper.
func TestReaperSharesSurviveAForeignReaperRecord(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	f.expiredClaims(6)
	now := f.serverNow()
	if _, err := f.raw.Collection("reapers").InsertMany(f.ctx, []any{
		bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "until", Value: now.Add(time.Hour)}},
		bson.D{{Key: "_id", Value: "host-x-77"}, {Key: "until", Value: "tomorrow"}},
	}); err != nil {
		t.Fatal(err)
	}
	p := listShare(t, f.s, f.serverNow(), "host-a-11")
	if len(p.Cards) != 6 || p.Reapers > 1 {
		t.Errorf("the only live reaper lists %d of 6 expired claims, shared by %d reapers; want all, alone", len(p.Cards), p.Reapers)
	}
}

// TestReaperSharesOutliveNoForwardStep: DESIGN.md#reaper-shares and
// DESIGN.md#clock-steps. A reaper's record is live until the server's time
// it was written at plus 1.5 intervals. If the server's clock ran ahead
// when a reaper last wrote it (a forward step, later put right), a reaper
// that died then would look live until the wrong clock's time came round
// again — a year, for a clock a year ahead — and its share would be listed
// to nobody all that while. A record written further ahead of the present
// than its own interval allows is no live reaper: a reaper that died must
// still hand its share over within 1.5 intervals of its last pass.
func TestReaperSharesOutliveNoForwardStep(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	clock := boardtest.NewManualClock(f.serverNow())
	uri := mongotest.ClockProxy(t, clock)
	open := func() *mongostore.Store {
		return openStore(t, mongostore.Options{URI: uri, Database: f.raw.Name(), Clock: clock})
	}
	a, b := open(), open()
	all := f.expiredClaims(12)
	list := func(s *mongostore.Store, r string) board.ListExpiredClaimCandidatesResult {
		return listShare(t, s, clock.Now(), r)
	}
	list(a, "host-a-11")
	list(b, "host-b-22")
	// The server's clock steps a year ahead; both reapers pass by it.
	// Then host-b dies, and the clock is put right.
	t0 := clock.Now()
	clock.Set(t0.Add(365 * 24 * time.Hour))
	list(a, "host-a-11")
	list(b, "host-b-22")
	clock.Set(t0.Add(time.Minute))
	list(a, "host-a-11")
	// Past 1.5 intervals after host-b's last pass, host-a is alone.
	clock.Set(t0.Add(time.Minute + 2*time.Minute))
	p := list(a, "host-a-11")
	if p.Reapers > 1 || len(p.Cards) != len(all) {
		t.Errorf("two minutes after the last pass of a reaper that died, the survivor lists %d of %d expired claims shared by %d reapers; want all, alone",
			len(p.Cards), len(all), p.Reapers)
	}
}

// TestAShareThatCannotBeWorkedOutListsEveryShare: DESIGN.md#reaper-shares.
// A reaper whose record cannot be written or read (the driver fails every
// command on the reapers collection) still lists: every expired claim,
// saying why, rather than nothing — a reaper whose record landed but whose
// read failed would otherwise hold a share it never examines.
func TestAShareThatCannotBeWorkedOutListsEveryShare(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	other := openStore(t, mongostore.Options{URI: mongotest.URI(t), Database: f.raw.Name()})
	f.expiredClaims(6)
	share := func(s *mongostore.Store, r string) board.ListExpiredClaimCandidatesResult {
		return listShare(t, s, f.serverNow(), r)
	}
	// Both reapers are recorded; then one loses the collection.
	share(f.s, "host-a-11")
	share(other, "host-b-22")
	dead, err := mongo.Connect(options.Client().ApplyURI(mongotest.URI(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := dead.Disconnect(f.ctx); err != nil {
		t.Fatal(err)
	}
	restore := mongostore.CutOffReapers(other, dead)
	p := share(other, "host-b-22")
	restore()
	if len(p.Cards) != 6 || p.Reapers != 0 || p.ShareError == "" {
		t.Errorf("a reaper that cannot reach the records lists %d of 6 claims, %d reapers, share error %q; want all 6, 0, the cause", len(p.Cards), p.Reapers, p.ShareError)
	}
}

// TestASlowReaperHoldsItsShareBriefly: DESIGN.md#reaper-shares. A reaper
// that passes once a day is live for 90 s after each pass, not a day and a
// half: the others examine its share the rest of the time.
func TestASlowReaperHoldsItsShareBriefly(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	for _, every := range []time.Duration{time.Minute, 24 * time.Hour} {
		if _, err := f.s.ListExpiredClaimCandidates(f.ctx, board.ListExpiredClaimCandidatesParams{Cutoff: f.serverNow(),
			Share: &board.ReaperShare{Reaper: "host-a-11", Interval: every}}); err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Until time.Time `bson:"until"`
			Since time.Time `bson:"since"`
		}
		if err := f.raw.Collection("reapers").FindOne(f.ctx, bson.D{{Key: "_id", Value: "host-a-11"}}).Decode(&rec); err != nil {
			t.Fatal(err)
		}
		want := min(every+every/2, 90*time.Second)
		if got := rec.Until.Sub(rec.Since); got != want {
			t.Errorf("a reaper passing every %s is recorded live for %s after its pass, want %s", every, got, want)
		}
	}
}

// expiredClaims creates n cards exp00…, each claimed by workerA with its
// lease ended, and returns their ids.
func (f *fleet) expiredClaims(n int) []string {
	f.t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("exp%02d", i)
		f.expiredClaim(id)
		ids = append(ids, id)
	}
	return ids
}

// expiredClaim creates card id, claimed by workerA with its lease ended.
func (f *fleet) expiredClaim(id string) {
	f.t.Helper()
	f.create(id, board.StateInProgress)
	if err := f.s.ExpireClaimOwned(f.ctx, board.OwnedParams{Card: id, Token: f.claim(id, workerA)}); err != nil {
		f.t.Fatal(err)
	}
}

// listShare lists reaper r's share of the claims expired at cutoff, as a
// reaper passing every minute does; a failed listing ends the test.
func listShare(t *testing.T, s *mongostore.Store, cutoff time.Time, r string) board.ListExpiredClaimCandidatesResult {
	t.Helper()
	p, err := s.ListExpiredClaimCandidates(t.Context(), board.ListExpiredClaimCandidatesParams{Cutoff: cutoff,
		Share: &board.ReaperShare{Reaper: r, Interval: time.Minute}})
	if err != nil {
		t.Fatalf("%s lists its share: %v", r, err)
	}
	return p
}
