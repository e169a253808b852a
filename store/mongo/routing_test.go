package mongostore_test

import (
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

// An operator removes the label a routed ClaimNext picked its first
// candidate by, between the pick's read of that card and its CAS: the
// labels as read are part of the CAS, so the card is passed over, not
// taken by a worker its labels no longer route to (DESIGN.md#label-routing).
func TestRoutedClaimNextPassesOverACardUnlabelledMidWrite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b, in, db := interleavedPairIn(t)
	for _, id := range []string{"c1", "c2"} {
		if _, err := b.CreateCard(ctx, board.CreateCardParams{ID: id, State: board.StateReady, Labels: []string{"gpu", "big"}}); err != nil {
			t.Fatal(err)
		}
	}
	// The removal is made through the store (a write with its event), and
	// as a bare $pull that stamps nothing (an older agent's write, or a
	// hand edit): only the labels as read tell the CAS of the latter.
	cards := mongotest.Client(t).Database(db).Collection("cards")
	remove := map[string]func(){
		"AdjustLabels": func() {
			if _, err := b.AdjustLabels(ctx, board.AdjustLabelsParams{Card: "c1", Remove: []string{"gpu"}, Actor: "uid:0"}); err != nil {
				t.Errorf("the operator's AdjustLabels: %v", err)
			}
		},
		"bare $pull": func() {
			if _, err := cards.UpdateByID(ctx, "c1", bson.D{{Key: "$pull", Value: bson.D{{Key: "labels", Value: "gpu"}}}}); err != nil {
				t.Errorf("the bare $pull: %v", err)
			}
		},
	}
	for _, how := range []string{"AdjustLabels", "bare $pull"} {
		for _, labels := range [][]string{{"gpu"}, {"big", "gpu"}} {
			t.Logf("%s, routed by %q", how, labels)
			in.before(remove[how])
			c, err := a.ClaimNext(ctx, board.ClaimNextParams{Marker: interleavedWorker, Lease: 30 * time.Second, Labels: labels})
			tok := c.Token()
			if err != nil {
				t.Fatalf("ClaimNext %q racing a label removal on the first candidate = %v, want c2", labels, err)
			}
			if in.armed.Load() {
				t.Fatal("no card CAS was interleaved: the case tests nothing")
			}
			if c.ID != "c2" {
				t.Errorf("ClaimNext %q = %s, want c2 (c1 lost gpu before the CAS)", labels, c.ID)
			}
			c1, err := b.GetCard(ctx, board.GetCardParams{ID: "c1"})
			if err != nil {
				t.Fatal(err)
			}
			if c1.Claimed() {
				t.Errorf("c1, no longer labelled gpu, was claimed by %q", c1.Claim)
			}
			if err := a.ReleaseOwned(ctx, board.OwnedParams{Card: c.ID, Token: tok}); err != nil {
				t.Fatal(err)
			}
			if _, err := b.AdjustLabels(ctx, board.AdjustLabelsParams{Card: "c1", Add: []string{"gpu"}, Actor: "uid:0"}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// interleavedPairIn is interleavedPair, naming the database.
func interleavedPairIn(t *testing.T) (*mongostore.Store, *mongostore.Store, *interleaver, string) {
	t.Helper()
	in := &interleaver{}
	uri, db := mongotest.URI(t), mongotest.Database(t)
	a := openStore(t, mongostore.Options{URI: uri, Database: db, Monitor: in.monitor()})
	b := openStore(t, mongostore.Options{URI: uri, Database: db})
	return a, b, in, db
}

// The same race for Start next, through the store and as a bare $set.
func TestRoutedStartNextPassesOverACardUnlabelledMidWrite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b, in, db := interleavedPairIn(t)
	for _, id := range []string{"c1", "c2", "c3", "c4"} {
		if _, err := b.CreateCard(ctx, board.CreateCardParams{ID: id, State: board.StateReady, Labels: []string{"gpu"}}); err != nil {
			t.Fatal(err)
		}
	}
	cards := mongotest.Client(t).Database(db).Collection("cards")
	for _, tc := range []struct {
		how, relabelled, want string
		relabel               func(id string) error
	}{
		{"SetLabels", "c1", "c2", func(id string) error {
			_, err := b.SetLabels(ctx, board.SetLabelsParams{Card: id, Labels: []string{"cpu"}, Actor: "uid:0"})
			return err
		}},
		{"bare $set", "c3", "c4", func(id string) error {
			_, err := cards.UpdateByID(ctx, id, bson.D{{Key: "$set", Value: bson.D{{Key: "labels", Value: bson.A{"cpu"}}}}})
			return err
		}},
	} {
		in.before(func() {
			if err := tc.relabel(tc.relabelled); err != nil {
				t.Errorf("%s: %v", tc.how, err)
			}
		})
		st, err := a.Start(ctx, board.StartParams{Next: true, Labels: []string{"gpu"}, Marker: interleavedWorker, Lease: 30 * time.Second, Run: board.Run{ID: "r-" + tc.want}})
		if err != nil {
			t.Fatalf("Start next racing a %s on the first candidate = %v, want %s started", tc.how, err, tc.want)
		}
		if in.armed.Load() {
			t.Fatal("no card CAS was interleaved: the case tests nothing")
		}
		if st.Card.ID != tc.want {
			t.Errorf("Start next [gpu] racing a %s = %s, want %s", tc.how, st.Card.ID, tc.want)
		}
		c, err := b.GetCard(ctx, board.GetCardParams{ID: tc.relabelled})
		if err != nil {
			t.Fatal(err)
		}
		if c.Claimed() || c.LastRunID != "" {
			t.Errorf("%s relabelled cpu by a %s: claimed by %q, last run %q; want free, no run", tc.relabelled, tc.how, c.Claim, c.LastRunID)
		}
	}
}

// Cards an older release wrote with no labels field, or a null one, are
// never routed to, are passed over without contention, and an unrouted
// pick still takes them.
func TestRoutedClaimNextOverCardsWithoutALabelsField(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	uri, db := mongotest.URI(t), mongotest.Database(t)
	s := openStore(t, mongostore.Options{URI: uri, Database: db})
	for _, id := range []string{"absent", "null", "empty", "gpu"} {
		if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: id, State: board.StateReady, Labels: []string{"gpu"}}); err != nil {
			t.Fatal(err)
		}
	}
	cards := mongotest.Client(t).Database(db).Collection("cards")
	for id, u := range map[string]bson.D{
		"absent": {{Key: "$unset", Value: bson.D{{Key: "labels", Value: ""}}}},
		"null":   {{Key: "$set", Value: bson.D{{Key: "labels", Value: nil}}}},
		"empty":  {{Key: "$set", Value: bson.D{{Key: "labels", Value: bson.A{}}}}},
	} {
		if _, err := cards.UpdateByID(ctx, id, u); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.ClaimNext(ctx, board.ClaimNextParams{Marker: "hosta-4243", Lease: time.Minute, Labels: []string{"gpu"}})
	tok := c.Token()
	if err != nil || c.ID != "gpu" {
		t.Fatalf("ClaimNext [gpu] = %q, %v; want gpu", c.ID, err)
	}
	if err := s.ReleaseOwned(ctx, board.OwnedParams{Card: c.ID, Token: tok}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetState(ctx, board.MoveParams{Card: "gpu", To: board.StateDone, Actor: "uid:0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimNext(ctx, board.ClaimNextParams{Marker: "hosta-4243", Lease: time.Minute, Labels: []string{"gpu"}}); !errors.Is(err, board.ErrNotFound) {
		t.Errorf("ClaimNext [gpu] over cards with no labels = %v, want ErrNotFound", err)
	}
	if c, err := s.ClaimNext(ctx, board.ClaimNextParams{Marker: "hosta-4243", Lease: time.Minute}); err != nil || c.ID != "absent" {
		t.Errorf("unrouted ClaimNext = %q, %v; want absent", c.ID, err)
	}
}
