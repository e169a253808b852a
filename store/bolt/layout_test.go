package boltstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/board"
)

func TestClaimRecordRoundTrip(t *testing.T) {
	at := time.Date(2026, 9, 2, 12, 0, 0, 123456789, time.UTC)
	tests := []struct {
		name string
		f    claimFamily
	}{
		{"free after release keeps its epoch", claimFamily{Epoch: 7}},
		{"held with a lease", claimFamily{Marker: "host-100", Epoch: 1, ClaimedAt: at, LeaseUntil: at.Add(30 * time.Second)}},
		{"legacy claim without a lease", claimFamily{Marker: "host-100", Epoch: 3, ClaimedAt: at}},
		{"recovery marker", claimFamily{Marker: board.RecoveryPrefix + "host-4242", Epoch: 1 << 40, ClaimedAt: at, LeaseUntil: at}},
		{"times outside the nanosecond range", claimFamily{Marker: "h-2", Epoch: 2,
			ClaimedAt: time.Date(1, 1, 1, 0, 0, 1, 1, time.UTC), LeaseUntil: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)}},
		{"long marker", claimFamily{Marker: strings.Repeat("h", board.MaxIDBytes-4) + "-100", Epoch: 1, ClaimedAt: at, LeaseUntil: at}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := appendClaim(nil, tt.f)
			if got, want := len(rec), claimHeaderLen+len(tt.f.Marker); got != want {
				t.Errorf("record is %d bytes, want %d", got, want)
			}
			got, err := decodeClaim(rec)
			if err != nil {
				t.Fatal(err)
			}
			// DeepEqual, not Equal: the decoded times must be the very
			// values a JSON decode yields (UTC, no monotonic reading), so
			// cards compare equal whichever path read them.
			if !reflect.DeepEqual(got, tt.f) {
				t.Errorf("decodeClaim(appendClaim(f)) = %+v, want %+v", got, tt.f)
			}
		})
	}
}

func TestDecodeClaimRefusesBadRecords(t *testing.T) {
	good := appendClaim(nil, claimFamily{Marker: "host-1", Epoch: 1})
	badNanos := bytes.Clone(good)
	copy(badNanos[claimOffLease+8:], []byte{0xff, 0xff, 0xff, 0xff})
	tests := []struct {
		name string
		rec  []byte
		want string
	}{
		{"empty", nil, "shorter than its"},
		{"truncated header", good[:claimHeaderLen-1], "shorter than its"},
		{"unknown format", append([]byte{9}, good[1:]...), "format 9"},
		{"nanoseconds out of range", badNanos, "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeClaim(tt.rec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("decodeClaim: %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

func TestCardDocumentLeavesOutTheClaimFamily(t *testing.T) {
	at := time.Date(2026, 9, 2, 12, 0, 0, 5, time.UTC)
	full := cardRecord{Seq: 42, Card: board.Card{
		ID: "a", Title: "t", State: board.StateInProgress, Labels: []string{"x"}, DependsOn: []string{"b"},
		LastRunID: "r2", LastRunEpoch: 8, Runs: []string{"r1", "r2"}, AwaitingInput: true, RecoveredEpoch: 7, DisownedEpoch: 9,
		GaveUp:      &board.GaveUp{RunID: "r2", State: "blocked", Attempts: 2, Reason: "why", At: at},
		StateReason: board.ReasonRunFailed, CreatedAt: at, UpdatedAt: at.Add(time.Second), PromotedBy: "b",
		Claim: "host-100", ClaimEpoch: 9, ClaimedAt: at, ClaimLeaseUntil: at.Add(time.Minute),
		Attempts: 3, RetryAt: at.Add(time.Hour), Retry: &board.RetryPolicy{MaxAttempts: 4, Backoff: time.Second, BackoffMax: time.Minute},
	}}
	// Every field of board.Card is set above, so a field added to the card
	// later is caught here until this test (and the record layout) learn it.
	v := reflect.ValueOf(full.Card)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("test card leaves board.Card.%s zero; set it", v.Type().Field(i).Name)
		}
	}
	doc, err := encodeCardDoc(&full)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(doc, &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"claim", "claim_epoch", "claimed_at", "claim_lease_until"} {
		if _, ok := fields[f]; ok {
			t.Errorf("card document carries %q: %s", f, doc)
		}
	}
	got, err := decodeCardDoc(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := full
	familyOf(&board.Card{}).apply(&want.Card)
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("decodeCardDoc(encodeCardDoc(c)) =\n%+v\nwant (c without its claim family)\n%+v", *got, want)
	}

	// A version 1 document (claim family inline) is refused, not half-read.
	v1, err := json.Marshal(v1CardRecord(full))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeCardDoc(v1); err == nil {
		t.Errorf("decodeCardDoc accepted a version 1 document: %s", v1)
	}
}

// touched records the buckets every write of s changes, through the
// committer's test hook; the hook runs on the committer goroutine.
func touched(s *Store) func() [][]string {
	var (
		mu  sync.Mutex
		got [][]string
	)
	s.c.mu.Lock()
	s.c.wrote = func(b []string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, b)
	}
	s.c.mu.Unlock()
	return func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		out := got
		got = nil
		return out
	}
}

// bucketDump renders each bucket of the file on its own, for comparing
// which buckets a write changed.
func bucketDump(t *testing.T, s *Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := settled(t, s).View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			var buf strings.Builder
			err := b.ForEach(func(k, v []byte) error {
				if walBookkeeping(name, k) {
					return nil
				}
				buf.WriteString(string(k) + "=" + string(v) + "\n")
				return nil
			})
			out[string(name)] = buf.String()
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func changedBuckets(before, after map[string]string) []string {
	var out []string
	for _, b := range allBuckets {
		if before[string(b)] != after[string(b)] {
			out = append(out, string(b))
		}
	}
	return out
}

// The contract says ordinary writes never touch the claim family; on this
// twin that means they never write the claims bucket at all.
func TestOrdinaryWritesNeverWriteTheClaimsBucket(t *testing.T) {
	s, clock, _ := openTest(t)
	ctx := t.Context()
	mustCreate(t, s, board.CreateCardParams{ID: "a"})
	mustCreate(t, s, board.CreateCardParams{ID: "b", DependsOn: []string{"a"}})
	tok := mustClaim(t, s, "a", "host-100")
	writes := []struct {
		name string
		do   func() error
	}{
		{"SetLabels", func() error {
			_, err := s.SetLabels(ctx, board.SetLabelsParams{Card: "a", Labels: []string{"x"}, Actor: "op"})
			return err
		}},
		{"AdjustLabels", func() error {
			_, err := s.AdjustLabels(ctx, board.AdjustLabelsParams{Card: "a", Add: []string{"y"}})
			return err
		}},
		{"SetAwaitingInputOwned", func() error {
			return s.SetAwaitingInputOwned(ctx, board.SetAwaitingInputOwnedParams{Card: "a", Token: tok, Awaiting: true})
		}},
		{"CreateRun", func() error {
			_, err := s.CreateRun(ctx, board.CreateRunParams{Token: tok, Run: board.Run{ID: "r1", Card: "a"}})
			return err
		}},
		{"SetLastRunOwned", func() error {
			return s.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: "a", Token: tok, RunID: "r0"})
		}},
		{"SetGaveUpOwned", func() error {
			return s.SetGaveUpOwned(ctx, board.SetGaveUpOwnedParams{Card: "a", Token: tok, GaveUp: &board.GaveUp{Reason: "r"}})
		}},
		{"SetStateOwned", func() error {
			_, err := s.SetStateOwned(ctx, board.SetStateOwnedParams{Card: "a", Token: tok, To: board.StateInProgress})
			return err
		}},
		{"SetState", func() error { return s.SetState(ctx, board.MoveParams{Card: "a", To: board.StateDone}) }},
		{"SetState of the promoted dependent back to waiting_deps", func() error {
			return s.SetState(ctx, board.MoveParams{Card: "b", To: board.StateWaitingDeps})
		}},
		{"Reopen", func() error { return s.Reopen(ctx, board.MoveParams{Card: "a", To: board.StateReady}) }},
	}
	written := touched(s)
	for _, w := range writes {
		clock.Advance(time.Second)
		if err := w.do(); err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		got := written()
		if len(got) != 1 || !slices.Contains(got[0], string(bucketCards)) {
			t.Fatalf("%s wrote %v, want one write of a card document; the test is not exercising a write", w.name, got)
		}
		if slices.Contains(got[0], string(bucketClaims)) {
			t.Errorf("%s wrote the claims bucket (buckets %v)", w.name, got[0])
		}
	}
	checkIndexes(t, s)
}

// A renewal writes the claim record and the lease index and nothing else:
// not the card document (updated_at stays), no event, no other index.
func TestRenewWritesOnlyClaimRecordsAndTheLeaseIndex(t *testing.T) {
	s, clock, _ := openTest(t)
	ctx := t.Context()
	var hs []board.Hold
	for _, id := range []string{"a", "b", "c"} {
		mustCreate(t, s, board.CreateCardParams{ID: id, Labels: []string{"l"}})
		hs = append(hs, board.Hold{Card: id, Token: mustClaim(t, s, id, "host-100")})
	}
	clock.Advance(10 * time.Second)
	before := bucketDump(t, s)
	written := touched(s)
	res, err := s.RenewClaims(ctx, board.RenewClaimsParams{Holds: hs, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil || !r.LeaseUntil.Equal(clock.Now().Add(lease)) {
			t.Errorf("renew %s: %+v, want a lease until %s", r.Card, r, clock.Now().Add(lease))
		}
	}
	after := bucketDump(t, s)
	want := []string{string(bucketClaims), string(bucketIdxLease)}
	if got := changedBuckets(before, after); !slices.Equal(got, want) {
		t.Errorf("renew changed buckets %v, want exactly %v", got, want)
	}
	if got := written(); len(got) != 1 || !slices.Equal(got[0], want) {
		t.Errorf("renew wrote %v, want one write of exactly %v", got, want)
	}
	checkIndexes(t, s)
}

// RenewClaims reads claim records in place; each refusal must still say
// what it said when it read the whole card.
func TestRenewClaimsPerHoldOutcomes(t *testing.T) {
	s, clock, _ := openTest(t)
	ctx := t.Context()
	mustCreate(t, s, board.CreateCardParams{ID: "held"})
	mustCreate(t, s, board.CreateCardParams{ID: "never"})
	mustCreate(t, s, board.CreateCardParams{ID: "released"})
	mustCreate(t, s, board.CreateCardParams{ID: "other"})
	held := mustClaim(t, s, "held", "host-100")
	rel := mustClaim(t, s, "released", "host-100")
	if err := s.ReleaseOwned(ctx, board.OwnedParams{Card: "released", Token: rel}); err != nil {
		t.Fatal(err)
	}
	other := mustClaim(t, s, "other", "host-200")
	clock.Advance(5 * time.Second)
	until := clock.Now().Add(lease)
	stale := board.ClaimToken{Marker: "host-100", Epoch: other.Epoch}

	res, err := s.RenewClaims(ctx, board.RenewClaimsParams{Holds: []board.Hold{
		{Card: "held", Token: held},
		{Card: "held", Token: held}, // the same hold twice in one batch
		{Card: "never", Token: board.ClaimToken{Marker: "host-100", Epoch: 1}},
		{Card: "released", Token: rel},
		{Card: "other", Token: stale},
		{Card: "missing", Token: held},
		{Card: "held", Token: board.ClaimToken{}},
	}, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		until          time.Time
		is             error
		holder         string
		epoch          int64
		wantConflictAt bool
	}
	wants := []want{
		{until: until},
		{until: until},
		{is: board.ErrClaimConflict, wantConflictAt: true, holder: "", epoch: 0},
		{is: board.ErrClaimConflict, wantConflictAt: true, holder: "", epoch: rel.Epoch},
		{is: board.ErrClaimConflict, wantConflictAt: true, holder: "host-200", epoch: other.Epoch},
		{is: board.ErrNotFound},
		{is: board.ErrInvalidArgument},
	}
	for i, w := range wants {
		r := res[i]
		if w.is == nil {
			if r.Err != nil || !r.LeaseUntil.Equal(w.until) {
				t.Errorf("result %d (%s) = %+v, want renewed until %s", i, r.Card, r, w.until)
			}
			continue
		}
		if !errors.Is(r.Err, w.is) || !r.LeaseUntil.IsZero() {
			t.Errorf("result %d (%s) = %+v, want %v", i, r.Card, r, w.is)
			continue
		}
		if w.wantConflictAt {
			ce, ok := board.AsClaimConflict(r.Err)
			if !ok || ce.Card != r.Card || ce.Holder != w.holder || ce.Epoch != w.epoch {
				t.Errorf("result %d (%s) conflict = %+v, want holder %q at epoch %d", i, r.Card, ce, w.holder, w.epoch)
			}
		}
	}

	// A shorter lease never moves a lease backwards: the result reports
	// the lease the card keeps.
	res, err = s.RenewClaims(ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: "held", Token: held}}, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || !res[0].LeaseUntil.Equal(until) {
		t.Errorf("shorter renewal = %+v, want the lease kept at %s", res[0], until)
	}
	c, err := s.GetCard(ctx, board.GetCardParams{ID: "held"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.ClaimLeaseUntil.Equal(until) || c.Token() != held {
		t.Errorf("card after renewals: %+v, want %+v until %s", c.Token(), held, until)
	}
	checkIndexes(t, s)
}
