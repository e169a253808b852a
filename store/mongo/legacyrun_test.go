package mongostore_test

import (
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/leasekeeper/leasekeeper/board"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

// legacyRun records a run the way an older version did: a document of its
// own in the runs collection, the card pointing at it by id only.
func (f *fleet) legacyRun(card, id string, tok board.ClaimToken, status board.RunStatus) {
	f.t.Helper()
	now := f.serverNow()
	if _, err := f.raw.Collection("runs").InsertOne(f.ctx, bson.D{
		{Key: "_id", Value: id}, {Key: "card", Value: card}, {Key: "status", Value: string(status)},
		{Key: "continuation", Value: "none"}, {Key: "failure_code", Value: ""}, {Key: "checkpoint", Value: "step-2"},
		{Key: "owner", Value: tok.Marker}, {Key: "epoch", Value: tok.Epoch}, {Key: "host", Value: "old-host"},
		{Key: "pid", Value: int64(77)}, {Key: "created_at", Value: now}, {Key: "updated_at", Value: now},
	}); err != nil {
		f.t.Fatalf("insert legacy run: %v", err)
	}
	f.foreign(card, bson.D{{Key: "$set", Value: bson.D{{Key: "last_run_id", Value: id}, {Key: "last_run_epoch", Value: tok.Epoch}, {Key: "runs", Value: bson.A{id}}}}})
}

// A run an older version wrote only in the runs collection is read, and
// adopted into its card before the first write to it, so the write is
// fenced like any other.
func TestLegacyRunIsAdoptedBeforeItsFirstWrite(t *testing.T) {
	t.Run("UpdateRun", func(t *testing.T) {
		f := openFleet(t, mongostore.Options{})
		f.create("c1", board.StateReady)
		tok := f.claim("c1", workerA)
		f.legacyRun("c1", "old", tok, board.RunRunning)
		if r, err := f.s.GetRun(f.ctx, board.GetRunParams{ID: "old"}); err != nil || r.Owner != workerA || r.Checkpoint != "step-2" {
			t.Fatalf("GetRun of a legacy run = %+v, %v", r, err)
		}
		cp := "step-3"
		// A stale token is refused and adopts nothing.
		stale := board.ClaimToken{Marker: workerB, Epoch: tok.Epoch}
		if _, err := f.s.UpdateRun(f.ctx, board.UpdateRunParams{ID: "old", Token: stale, Checkpoint: &cp}); !errors.Is(err, board.ErrClaimConflict) {
			t.Fatalf("UpdateRun of a legacy run under another claim = %v, want ErrClaimConflict", err)
		}
		if n, _ := f.cards.CountDocuments(f.ctx, bson.D{{Key: "run.id", Value: "old"}}); n != 0 {
			t.Errorf("a refused write adopted the legacy run")
		}
		got, err := f.s.UpdateRun(f.ctx, board.UpdateRunParams{ID: "old", Token: tok, Checkpoint: &cp})
		if err != nil || got.Checkpoint != cp {
			t.Fatalf("UpdateRun of a legacy run = %+v, %v", got, err)
		}
		if n, _ := f.cards.CountDocuments(f.ctx, bson.D{{Key: "run.id", Value: "old"}}); n != 1 {
			t.Errorf("the legacy run was not adopted into its card")
		}
		if r, err := f.s.GetRun(f.ctx, board.GetRunParams{ID: "old"}); err != nil || r.Checkpoint != cp {
			t.Errorf("GetRun after the adoption = %+v, %v; want the written checkpoint", r, err)
		}
	})
	t.Run("ReleaseThenStartSupersedes", func(t *testing.T) {
		f := openFleet(t, mongostore.Options{})
		f.create("c1", board.StateReady)
		tok := f.claim("c1", workerA)
		f.legacyRun("c1", "old", tok, board.RunRunning)
		if err := f.s.Release(f.ctx, board.ReleaseParams{Card: "c1", Marker: workerA, Actor: "uid:0"}); err != nil {
			t.Fatal(err)
		}
		if r, _ := f.s.GetRun(f.ctx, board.GetRunParams{ID: "old"}); r.Status != board.RunFailedResumable || r.FailureCode != board.FailureClaimReleased {
			t.Fatalf("legacy run after a force-release = %+v, want closed resumable", r)
		}
		if err := f.s.SetState(f.ctx, board.MoveParams{Card: "c1", To: board.StateReady, Actor: "uid:0"}); err != nil {
			t.Fatal(err)
		}
		// The fleet twin starts every run fresh: the adopted legacy run is
		// archived closed, superseded, and the new one is the card's.
		st, err := f.s.Start(f.ctx, board.StartParams{Card: "c1", Marker: workerB, Lease: testTerm, Run: board.Run{ID: "new"}})
		if err != nil || st.Resumed || st.Run.ID != "new" || st.Run.Owner != workerB {
			t.Fatalf("Start over a legacy resumable run = %+v, %v; want a fresh run", st, err)
		}
		if r, err := f.s.GetRun(f.ctx, board.GetRunParams{ID: "old"}); err != nil || r.Status != board.RunCancelled || r.FailureCode != board.FailureRunSuperseded || r.Checkpoint != "step-2" {
			t.Errorf("superseded run as archived = %+v, %v; want cancelled %s with its checkpoint", r, err, board.FailureRunSuperseded)
		}
		if c, err := f.s.GetCard(f.ctx, board.GetCardParams{ID: "c1"}); err != nil || c.LastRunID != "new" || len(c.Runs) != 2 {
			t.Errorf("card after the fresh Start = %+v, %v; want it pointing at new with two runs", c, err)
		}
	})
}
