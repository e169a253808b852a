package boltstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
)

// copyFixture copies the schema version 1 file into a fresh temp dir.
func copyFixture(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "schema1", "schema1.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "board.db")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// schemaOf reads the stamp and whether the claims bucket exists, without
// going through Open (which would migrate).
func schemaOf(t *testing.T, path string) (stamp string, hasClaims bool) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		stamp = string(tx.Bucket(bucketMeta).Get(keySchema))
		hasClaims = tx.Bucket(bucketClaims) != nil
		return nil
	})
	return stamp, hasClaims
}

// snapshot is everything a caller can read back from a store, as JSON.
func snapshot(t *testing.T, s *Store, runs ...string) []byte {
	t.Helper()
	ctx := t.Context()
	cards, err := s.ListCards(ctx, board.ListCardsParams{})
	if err != nil {
		t.Fatal(err)
	}
	events, err := s.Events(ctx, board.EventsParams{After: 0, Limit: 0})
	if err != nil {
		t.Fatal(err)
	}
	rs := []board.Run{}
	for _, id := range runs {
		r, err := s.GetRun(ctx, board.GetRunParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	out, err := json.MarshalIndent(map[string]any{"cards": cards, "events": events, "runs": rs}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

// checkNoClaimFamilyInDocs fails if any card document still carries a claim
// field: after the migration the family lives only in the claims bucket.
func checkNoClaimFamilyInDocs(t *testing.T, s *Store) {
	t.Helper()
	err := settled(t, s).View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCards).ForEach(func(k, v []byte) error {
			var doc map[string]json.RawMessage
			if err := json.Unmarshal(v, &doc); err != nil {
				return err
			}
			for _, f := range []string{"claim", "claim_epoch", "claimed_at", "claim_lease_until"} {
				if _, ok := doc[f]; ok {
					t.Errorf("card %q document still has %q: %s", k, f, v)
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestMigrateSchema1Fixture(t *testing.T) {
	path := copyFixture(t)
	if stamp, hasClaims := schemaOf(t, path); stamp != "1" || hasClaims {
		t.Fatalf("fixture is schema %q with claims bucket %v, want a version 1 file", stamp, hasClaims)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "schema1", "schema1.json"))
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	s, err := Open(path, Options{Clock: clock})
	if err != nil {
		t.Fatalf("Open of a schema 1 file: %v", err)
	}
	defer s.Close()
	_ = settled(t, s).View(func(tx *bolt.Tx) error {
		stamp, hasClaims := string(tx.Bucket(bucketMeta).Get(keySchema)), tx.Bucket(bucketClaims) != nil
		if stamp != strconv.Itoa(SchemaVersion) || !hasClaims {
			t.Errorf("after Open: schema %q, claims bucket %v; want %d with a claims bucket", stamp, hasClaims, SchemaVersion)
		}
		return nil
	})
	if got := snapshot(t, s, "run-1"); !bytes.Equal(got, want) {
		t.Errorf("migrated store reads back differently from the schema 1 code:\ngot:\n%s\nwant:\n%s", got, want)
	}
	checkIndexes(t, s)
	checkNoClaimFamilyInDocs(t, s)
	// The fixture's one recovery claim is in the recovery index built on
	// the way from version 2 to 3.
	rec, err := s.ListCards(t.Context(), board.ListCardsParams{RecoveryOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(rec), []string{"reclaimed"}; !slices.Equal(got, want) {
		t.Errorf("ListCards(recovery) after migration = %v, want %v", got, want)
	}

	// The fences carry on from the migrated epochs.
	ctx := t.Context()
	res, err := s.RenewClaims(ctx, board.RenewClaimsParams{Holds: []board.Hold{
		{Card: "held", Token: board.ClaimToken{Marker: "host-100", Epoch: 1}},
		{Card: "reclaimed", Token: board.ClaimToken{Marker: "host-101", Epoch: 1}},
	}, Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil {
		t.Errorf("renewing the migrated holder of held: %v", res[0].Err)
	}
	if ce, ok := board.AsClaimConflict(res[1].Err); !ok || ce.Holder != board.RecoveryPrefix+"host-4242" || ce.Epoch != 2 {
		t.Errorf("renewing the superseded token on reclaimed: %v, want a conflict with the reaper at epoch 2", res[1].Err)
	}
	for _, tt := range []struct {
		card string
		want int64
	}{{"fresh", 1}, {"released", 4}, {"finished", 2}} {
		if got := mustClaim(t, s, tt.card, "host-300").Epoch; got != tt.want {
			t.Errorf("claim of %s after migration: epoch %d, want %d", tt.card, got, tt.want)
		}
	}
	checkIndexes(t, s)

	// A second open finds a current file and changes nothing.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := rawDump(t, path)
	s2, err := Open(path, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if after := rawDump(t, path); after != before {
		t.Errorf("reopening a migrated file changed it:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestMigrateFailureLeavesTheFileAsItWas(t *testing.T) {
	path := copyFixture(t)
	// Break one card record so the migration fails part-way through.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCards).Put([]byte("released"), []byte(`{"id":"released","claim_epoch":"three"}`))
	})
	_ = db.Close()
	if err != nil {
		t.Fatal(err)
	}
	before := rawDump(t, path)

	_, err = Open(path, Options{})
	if !errors.Is(err, ErrSchema) {
		t.Fatalf("Open with a broken version 1 record: %v, want ErrSchema", err)
	}
	for _, want := range []string{fmt.Sprintf("migrating schema version 1 to %d", SchemaVersion), "from version 1", `"released"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if after := rawDump(t, path); after != before {
		t.Errorf("a failed migration changed the file:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if stamp, hasClaims := schemaOf(t, path); stamp != "1" || hasClaims {
		t.Errorf("after a failed migration: schema %q, claims bucket %v; want version 1 untouched", stamp, hasClaims)
	}
}

// downgrade rewrites a current file into the version 1 layout, the way the
// version 1 code stored it: each card one JSON document with its claim
// family inline, no claims bucket, stamp 1. edit, when set, may change a
// card on the way (the indexes follow it).
func downgrade(t *testing.T, path string, edit func(*v1CardRecord)) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		cards, claims := tx.Bucket(bucketCards), tx.Bucket(bucketClaims)
		var recs []*cardRecord
		err := cards.ForEach(func(k, v []byte) error {
			r, err := decodeCard(v, claims.Get(k))
			recs = append(recs, r)
			return err
		})
		if err != nil {
			return err
		}
		for _, r := range recs {
			old := v1CardRecord{Card: r.Card, Seq: r.Seq}
			if edit != nil {
				edit(&old)
				for _, e := range indexEntries(r) {
					if err := tx.Bucket(e.bucket).Delete(e.key); err != nil {
						return err
					}
				}
				for _, e := range indexEntries(&cardRecord{Card: old.Card, Seq: old.Seq}) {
					if err := tx.Bucket(e.bucket).Put(e.key, e.value); err != nil {
						return err
					}
				}
			}
			v, err := json.Marshal(old)
			if err != nil {
				return err
			}
			if err := cards.Put([]byte(r.ID), v); err != nil {
				return err
			}
		}
		if err := tx.DeleteBucket(bucketClaims); err != nil {
			return err
		}
		// Version 1 had no recovery index either (it came with version
		// 3), nor a label index (version 5).
		if err := tx.DeleteBucket(bucketIdxRecovery); err != nil {
			return err
		}
		if err := tx.DeleteBucket(bucketIdxLabel); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySchema, []byte("1"))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A random workload leaves every kind of claim family behind; taking the
// file back to version 1 and migrating it again must reproduce it exactly.
func TestMigrateRandomWorkloadRoundTrip(t *testing.T) {
	s, clock, path := openTest(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	cards := []string{}
	newCard := func() string {
		id := fmt.Sprintf("c%03d", len(cards))
		cards = append(cards, id)
		return id
	}
	for range 10 {
		mustCreate(t, s, board.CreateCardParams{ID: newCard()})
	}
	w := &randomWorker{
		s: s, clock: clock, rng: rand.New(rand.NewPCG(seed, 2)),
		markers: []string{"h-100", "h-200", "h-300"},
		cards:   func() []string { return cards },
		newCard: newCard,
		tokens:  map[string]board.ClaimToken{},
	}
	for range 400 {
		if err := w.step(t); err != nil {
			t.Fatal(err)
		}
	}
	want := snapshot(t, s)
	epochs := 0
	for _, r := range allCards(t, s) {
		if r.ClaimEpoch > 0 {
			epochs++
		}
	}
	if epochs < 3 {
		t.Fatalf("only %d cards were ever claimed; the workload did not exercise claims", epochs)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	downgrade(t, path, nil)

	s, err := Open(path, Options{Clock: clock})
	if err != nil {
		t.Fatalf("Open of the version 1 file: %v", err)
	}
	defer s.Close()
	if got := snapshot(t, s); !bytes.Equal(got, want) {
		t.Errorf("after the round trip through version 1:\ngot:\n%s\nwant:\n%s", got, want)
	}
	checkIndexes(t, s)
	checkListings(t, s, clock.Now())
	checkNoClaimFamilyInDocs(t, s)
}

// A version 1 file may hold a legacy claim (no lease): the migration keeps
// it legacy (out of the lease index), and a renewal then gives it a lease.
func TestMigrateKeepsALegacyClaim(t *testing.T) {
	s, clock, path := openTest(t)
	mustCreate(t, s, board.CreateCardParams{ID: "legacy"})
	mustCreate(t, s, board.CreateCardParams{ID: "leased"})
	tok := mustClaim(t, s, "legacy", "host-500")
	mustClaim(t, s, "leased", "host-501")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	downgrade(t, path, func(r *v1CardRecord) {
		if r.ID == "legacy" {
			r.ClaimLeaseUntil = time.Time{}
		}
	})

	s, err := Open(path, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkIndexes(t, s)
	ctx := t.Context()
	c, err := s.GetCard(ctx, board.GetCardParams{ID: "legacy"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Legacy() || c.Token() != tok {
		t.Fatalf("migrated card: claim %q@%d lease %s, want a legacy claim by %+v", c.Claim, c.ClaimEpoch, c.ClaimLeaseUntil, tok)
	}
	clock.Advance(time.Hour)
	expired, err := boardtest.PageCards(s.ListExpiredClaimCandidates(ctx, board.ListExpiredClaimCandidatesParams{Cutoff: clock.Now(), Limit: 0}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(expired), []string{"leased"}; !slices.Equal(got, want) {
		t.Errorf("expired candidates = %v, want %v (a legacy claim is never reaped by time)", got, want)
	}
	res, err := s.RenewClaims(ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: "legacy", Token: tok}}, Lease: lease})
	if err != nil || res[0].Err != nil {
		t.Fatalf("renew the legacy claim: %v, %v", err, res[0].Err)
	}
	if got, want := res[0].LeaseUntil, clock.Now().Add(lease); !got.Equal(want) {
		t.Errorf("renewed lease = %s, want %s", got, want)
	}
	checkIndexes(t, s)
}

// toSchema2 rewrites a current file into the version 2 layout: the same
// buckets without the recovery index, stamped 2. edit, when set, runs in the
// same transaction (to break the file on purpose).
func toSchema2(t *testing.T, path string, edit func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketIdxRecovery); err != nil {
			return err
		}
		if err := tx.DeleteBucket(bucketIdxLabel); err != nil {
			return err
		}
		if edit != nil {
			if err := edit(tx); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keySchema, []byte("2"))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// recoveryFixture leaves every kind of claim a recovery index must tell
// apart: a worker's live claim, a worker's expired claim, recovery claims
// live and expired, a recovery claim released (free, epoch kept), a card a
// worker re-claimed after a recovery claim was released, and a card never
// claimed. It returns the cards the index must hold, in creation order.
func recoveryFixture(t *testing.T, s *Store, clock *fakeClock) []string {
	t.Helper()
	ctx := t.Context()
	for _, id := range []string{"free", "worker-live", "worker-expired", "recovery-live", "recovery-expired", "recovery-released", "worker-after-recovery"} {
		mustCreate(t, s, board.CreateCardParams{ID: id})
		clock.Advance(time.Millisecond)
	}
	reclaim := func(id string, l time.Duration) board.ClaimToken {
		t.Helper()
		c, err := s.GetCard(ctx, board.GetCardParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		card, err := s.ReclaimExpired(ctx, board.ReclaimExpiredParams{Card: id, Prev: c.Token(), RecoveryMarker: "reaper:agent-9", Cutoff: clock.Now(), Lease: l})
		tok := card.Token()
		if err != nil {
			t.Fatalf("ReclaimExpired %s: %v", id, err)
		}
		return tok
	}
	for _, id := range []string{"worker-expired", "recovery-live", "recovery-expired", "recovery-released", "worker-after-recovery"} {
		mustClaim(t, s, id, "host-100")
	}
	clock.Advance(lease + time.Second)
	reclaim("recovery-live", time.Hour)
	reclaim("recovery-expired", time.Second)
	if err := s.ReleaseOwned(ctx, board.OwnedParams{Card: "recovery-released", Token: reclaim("recovery-released", time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, board.ReleaseParams{Card: "worker-after-recovery", Marker: reclaim("worker-after-recovery", time.Hour).Marker, Actor: "uid:0"}); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, "worker-after-recovery", "host-200")
	mustClaim(t, s, "worker-live", "host-300")
	clock.Advance(2 * time.Second)
	return []string{"recovery-live", "recovery-expired"}
}

// Opening a version 2 file builds the recovery index in the same
// transaction as the new stamp, and changes nothing else: the file ends up
// byte for byte what the current code writes, epochs included.
func TestMigrateSchema2BuildsTheRecoveryIndex(t *testing.T) {
	s, clock, path := openTest(t)
	want := recoveryFixture(t, s, clock)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	current := rawDump(t, path)
	toSchema2(t, path, nil)
	if stamp, _ := schemaOf(t, path); stamp != "2" {
		t.Fatalf("fixture is schema %q, want 2", stamp)
	}

	s, err := Open(path, Options{Clock: clock})
	if err != nil {
		t.Fatalf("Open of a schema 2 file: %v", err)
	}
	defer s.Close()
	checkIndexes(t, s)
	checkListings(t, s, clock.Now())
	got, err := s.ListCards(t.Context(), board.ListCardsParams{RecoveryOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(got), want) {
		t.Errorf("ListCards(recovery) after migration = %v, want %v", ids(got), want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if after := rawDump(t, path); after != current {
		t.Errorf("the migrated file differs from the one the current code wrote:\nmigrated:\n%s\ncurrent:\n%s", after, current)
	}
}

func TestMigrateSchema2FailureLeavesTheFileAsItWas(t *testing.T) {
	s, clock, path := openTest(t)
	recoveryFixture(t, s, clock)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The card document behind a recovery claim is unreadable, so the
	// migration fails part-way through the index it builds.
	toSchema2(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCards).Put([]byte("recovery-expired"), []byte(`{"id":`))
	})
	before := rawDump(t, path)

	_, err := Open(path, Options{Clock: clock})
	if !errors.Is(err, ErrSchema) {
		t.Fatalf("Open with a broken card behind a recovery claim: %v, want ErrSchema", err)
	}
	for _, want := range []string{fmt.Sprintf("migrating schema version 2 to %d", SchemaVersion), `"recovery-expired"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if after := rawDump(t, path); after != before {
		t.Errorf("a failed migration changed the file:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if stamp, _ := schemaOf(t, path); stamp != "2" {
		t.Errorf("after a failed migration: schema %q, want 2 untouched", stamp)
	}
}

// Opening a version 4 file builds the label index once the file holds
// every log record, and changes nothing else: the file ends up byte for
// byte what the current code writes (DESIGN.md#label-routing).
func TestMigrateSchema4BuildsTheLabelIndex(t *testing.T) {
	s, clock, path := openTest(t)
	for _, nc := range []board.CreateCardParams{
		{ID: "plain"},
		{ID: "gpu-old", Labels: []string{"gpu"}},
		{ID: "gpu-big", Labels: []string{"big", "gpu"}},
		{ID: "gpu-held", Labels: []string{"gpu"}},
		{ID: "gpu-done", Labels: []string{"gpu"}, State: board.StateDone},
	} {
		mustCreate(t, s, nc)
		clock.Advance(time.Millisecond)
	}
	mustClaim(t, s, "gpu-held", "host-100")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	current := rawDump(t, path)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketIdxLabel); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySchema, []byte("4"))
	})
	_ = db.Close()
	if err != nil {
		t.Fatal(err)
	}

	s, err = Open(path, Options{Clock: clock})
	if err != nil {
		t.Fatalf("Open of a schema 4 file: %v", err)
	}
	checkIndexes(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if after := rawDump(t, path); after != current {
		t.Errorf("the migrated file differs from the one the current code wrote:\nmigrated:\n%s\ncurrent:\n%s", after, current)
	}

	s, err = Open(path, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		labels []string
		want   string
	}{{[]string{"gpu"}, "gpu-old"}, {[]string{"gpu", "big"}, "gpu-big"}, {[]string{"big", "gpu"}, "gpu-big"}} {
		c, err := s.ClaimNext(t.Context(), board.ClaimNextParams{Marker: "host-200", Lease: time.Minute, Labels: tc.labels})
		tok := c.Token()
		if err != nil {
			t.Fatalf("ClaimNext %q after the migration: %v", tc.labels, err)
		}
		if c.ID != tc.want {
			t.Errorf("ClaimNext %q = %s, want %s", tc.labels, c.ID, tc.want)
		}
		if err := s.ReleaseOwned(t.Context(), board.OwnedParams{Card: c.ID, Token: tok}); err != nil {
			t.Fatal(err)
		}
	}
}
