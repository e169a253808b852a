package boltstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
)

// randomWorker drives random verbs against a store, keeping the tokens it
// was granted (some of which go stale as others reclaim or release).
type randomWorker struct {
	s       *Store
	clock   *fakeClock
	rng     *rand.Rand
	markers []string
	cards   func() []string
	newCard func() string
	tokens  map[string]board.ClaimToken // card → last token this worker got
}

// step runs one random verb. Refusals are expected and ignored; anything
// else is returned.
func (w *randomWorker) step(t *testing.T) error {
	ctx := t.Context()
	cards := w.cards()
	pick := func() string { return cards[w.rng.IntN(len(cards))] }
	marker := w.markers[w.rng.IntN(len(w.markers))]
	states := w.s.brd().States
	state := states[w.rng.IntN(len(states))].Name
	tok := func(card string) board.ClaimToken {
		if tk, ok := w.tokens[card]; ok {
			return tk
		}
		return board.ClaimToken{Marker: marker, Epoch: 1}
	}
	var err error
	switch op := w.rng.IntN(15); op {
	case 0:
		var deps []string
		for range w.rng.IntN(3) {
			deps = append(deps, pick())
		}
		_, err = w.s.CreateCard(ctx, board.CreateCardParams{ID: w.newCard(), DependsOn: deps, Labels: []string{"l" + fmt.Sprint(w.rng.IntN(3))}})
	case 1, 2:
		c := pick()
		var got board.Card
		got, err = w.s.Claim(ctx, board.ClaimParams{Card: c, Marker: marker, Lease: time.Duration(1+w.rng.IntN(60)) * time.Second})
		if err == nil {
			w.tokens[c] = got.Token()
		}
	case 3:
		var c board.Card
		var tk board.ClaimToken
		c, err = w.s.ClaimNext(ctx, board.ClaimNextParams{Marker: marker, Lease: lease})
		tk = c.Token()
		if err == nil {
			w.tokens[c.ID] = tk
		}
	case 4:
		var hs []board.Hold
		for c, tk := range w.tokens {
			hs = append(hs, board.Hold{Card: c, Token: tk})
		}
		if len(hs) > 0 {
			_, err = w.s.RenewClaims(ctx, board.RenewClaimsParams{Holds: hs, Lease: time.Duration(1+w.rng.IntN(60)) * time.Second})
		}
	case 5:
		c := pick()
		err = w.s.ReleaseOwned(ctx, board.OwnedParams{Card: c, Token: tok(c)})
	case 6:
		c := pick()
		if cur, gerr := w.s.GetCard(ctx, board.GetCardParams{ID: c}); gerr == nil && cur.Claimed() {
			err = w.s.Release(ctx, board.ReleaseParams{Card: c, Marker: cur.Claim, Actor: "uid:0"})
		}
	case 7:
		err = w.s.SetState(ctx, board.MoveParams{Card: pick(), To: state})
	case 8:
		c := pick()
		_, err = w.s.SetStateOwned(ctx, board.SetStateOwnedParams{Card: c, Token: tok(c), To: state})
	case 9:
		_, err = w.s.AdjustLabels(ctx, board.AdjustLabelsParams{Card: pick(), Add: []string{"l" + fmt.Sprint(w.rng.IntN(4))}, Remove: []string{"l" + fmt.Sprint(w.rng.IntN(4))}})
	case 10:
		c := pick()
		err = w.s.ExpireClaimOwned(ctx, board.OwnedParams{Card: c, Token: tok(c)})
	case 11:
		c := pick()
		if cur, gerr := w.s.GetCard(ctx, board.GetCardParams{ID: c}); gerr == nil && cur.Claimed() {
			var got board.Card
			got, err = w.s.ReclaimExpired(ctx, board.ReclaimExpiredParams{Card: c, Prev: cur.Token(), RecoveryMarker: board.RecoveryMarker(marker), Cutoff: w.clock.Now(), Lease: lease})
			if err == nil {
				w.tokens[c] = got.Token()
			}
		}
	case 12:
		err = w.s.Reopen(ctx, board.MoveParams{Card: pick(), To: board.StateReady})
	case 13:
		c := pick()
		_, err = w.s.SetStateOwned(ctx, board.SetStateOwnedParams{Card: c, Token: tok(c), To: board.StateDone, Reason: board.ReasonRunFinished})
	case 14:
		w.clock.Advance(time.Duration(w.rng.IntN(20)) * time.Second)
	}
	switch {
	case err == nil,
		errors.Is(err, board.ErrClaimConflict),
		errors.Is(err, board.ErrNotFound),
		errors.Is(err, board.ErrTransitionRejected):
		return nil
	}
	return fmt.Errorf("unexpected error: %w", err)
}

// checkListings compares every index-backed listing with the brute-force
// answer computed from the cards bucket.
func checkListings(t *testing.T, s *Store, now time.Time) {
	t.Helper()
	ctx := t.Context()
	all := allCards(t, s)
	want := func(keep func(*cardRecord) bool) []string {
		out := []string{}
		for _, r := range all {
			if keep(r) {
				out = append(out, r.ID)
			}
		}
		return out
	}
	list := func(f board.ListCardsParams) []string {
		cs, err := s.ListCards(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return append([]string{}, ids(cs)...)
	}
	if got, w := list(board.ListCardsParams{}), want(func(*cardRecord) bool { return true }); !slices.Equal(got, w) {
		t.Errorf("ListCards() = %v, want %v", got, w)
	}
	if got, w := list(board.ListCardsParams{ClaimedOnly: true}), want(func(r *cardRecord) bool { return r.Claimed() }); !slices.Equal(got, w) {
		t.Errorf("ListCards(claimed) = %v, want %v", got, w)
	}
	recovery := want(func(r *cardRecord) bool { return board.IsRecoveryMarker(r.Claim) })
	if got := list(board.ListCardsParams{RecoveryOnly: true}); !slices.Equal(got, recovery) {
		t.Errorf("ListCards(recovery) = %v, want %v", got, recovery)
	}
	if got := list(board.ListCardsParams{RecoveryOnly: true, ClaimedOnly: true}); !slices.Equal(got, recovery) {
		t.Errorf("ListCards(recovery, claimed) = %v, want %v", got, recovery)
	}
	if got, w := list(board.ListCardsParams{RecoveryOnly: true, Limit: 1}), recovery[:min(1, len(recovery))]; !slices.Equal(got, w) {
		t.Errorf("ListCards(recovery, limit 1) = %v, want %v", got, w)
	}
	for _, st := range s.brd().States {
		if got, w := list(board.ListCardsParams{State: st.Name}), want(func(r *cardRecord) bool { return r.State == st.Name }); !slices.Equal(got, w) {
			t.Errorf("ListCards(%s) = %v, want %v", st.Name, got, w)
		}
		got := list(board.ListCardsParams{State: st.Name, ClaimedOnly: true})
		if w := want(func(r *cardRecord) bool { return r.State == st.Name && r.Claimed() }); !slices.Equal(got, w) {
			t.Errorf("ListCards(%s, claimed) = %v, want %v", st.Name, got, w)
		}
		got = list(board.ListCardsParams{State: st.Name, RecoveryOnly: true})
		if w := want(func(r *cardRecord) bool { return r.State == st.Name && board.IsRecoveryMarker(r.Claim) }); !slices.Equal(got, w) {
			t.Errorf("ListCards(%s, recovery) = %v, want %v", st.Name, got, w)
		}
	}
	var expired []*cardRecord
	for _, r := range all {
		if r.LeaseExpired(now) {
			expired = append(expired, r)
		}
	}
	slices.SortFunc(expired, func(a, b *cardRecord) int {
		return bytes.Compare(leaseKey(a.ClaimLeaseUntil, a.ID), leaseKey(b.ClaimLeaseUntil, b.ID))
	})
	wantExpired := []string{}
	for _, r := range expired {
		wantExpired = append(wantExpired, r.ID)
	}
	for _, limit := range []int{0, 1, 3} {
		cs, err := boardtest.PageCards(s.ListExpiredClaimCandidates(ctx, board.ListExpiredClaimCandidatesParams{Cutoff: now, Limit: limit}))
		if err != nil {
			t.Fatal(err)
		}
		w := wantExpired
		if limit > 0 && len(w) > limit {
			w = w[:limit]
		}
		if got := append([]string{}, ids(cs)...); !slices.Equal(got, w) {
			t.Errorf("ListExpiredClaimCandidates(now, %d) = %v, want %v", limit, got, w)
		}
	}
	for _, r := range all {
		cs, err := s.Dependents(ctx, board.DependentsParams{ID: r.ID})
		if err != nil {
			t.Fatal(err)
		}
		w := want(func(d *cardRecord) bool { return slices.Contains(d.DependsOn, r.ID) })
		if got := append([]string{}, ids(cs)...); !slices.Equal(got, w) {
			t.Errorf("Dependents(%s) = %v, want %v", r.ID, got, w)
		}
	}
}

func TestIndexesStayConsistentUnderARandomWorkload(t *testing.T) {
	s, clock, _ := openTest(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var n int
	cards := []string{}
	for range 8 {
		n++
		id := fmt.Sprintf("c%03d", n)
		mustCreate(t, s, board.CreateCardParams{ID: id})
		cards = append(cards, id)
	}
	w := &randomWorker{
		s: s, clock: clock, rng: rand.New(rand.NewPCG(seed, 1)),
		markers: []string{"h-100", "h-200", "h-300"},
		cards:   func() []string { return cards },
		newCard: func() string {
			n++
			id := fmt.Sprintf("c%03d", n)
			cards = append(cards, id)
			return id
		},
		tokens: map[string]board.ClaimToken{},
	}
	// recoveryHeld counts the checkpoints that ran with a recovery claim on
	// the board, so the recovery index is known to have been checked with
	// entries in it, not only empty. Besides every 100th step, a checkpoint
	// runs at the first step that leaves a recovery claim, and once more
	// after a reclaim made on purpose at the end, whatever the seed did.
	recoveryHeld := 0
	checkpoint := func() {
		t.Helper()
		checkIndexes(t, s)
		checkListings(t, s, clock.Now())
		if holdsRecovery(t, s) {
			recoveryHeld++
		}
	}
	for i := range 600 {
		if err := w.step(t); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 || (recoveryHeld == 0 && holdsRecovery(t, s)) {
			checkpoint()
		}
	}
	ctx := t.Context()
	last := w.newCard()
	mustCreate(t, s, board.CreateCardParams{ID: last})
	card, err := s.Claim(ctx, board.ClaimParams{Card: last, Marker: "h-100", Lease: time.Second})
	tok := card.Token()
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	if _, err := s.ReclaimExpired(ctx, board.ReclaimExpiredParams{Card: last, Prev: tok, RecoveryMarker: board.RecoveryMarker("h-900"), Cutoff: clock.Now(), Lease: lease}); err != nil {
		t.Fatalf("reclaiming an expired claim at the end: %v", err)
	}
	before := recoveryHeld
	checkpoint()
	if recoveryHeld == before {
		t.Errorf("after a reclaim no card holds a recovery claim; the recovery index was never checked with an entry")
	}
}

// holdsRecovery says whether any card is held by a recovery claim.
func holdsRecovery(t *testing.T, s *Store) bool {
	t.Helper()
	for _, r := range allCards(t, s) {
		if board.IsRecoveryMarker(r.Claim) {
			return true
		}
	}
	return false
}

func TestConcurrentWritersKeepEpochsEventsAndIndexesConsistent(t *testing.T) {
	s, clock, _ := openTest(t)
	const nCards = 10
	cards := make([]string, nCards)
	for i := range cards {
		cards[i] = fmt.Sprintf("c%02d", i)
		mustCreate(t, s, board.CreateCardParams{ID: cards[i]})
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var (
		mu      sync.Mutex
		created int
	)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			w := &randomWorker{
				s: s, clock: clock, rng: rand.New(rand.NewPCG(seed, uint64(g))),
				markers: []string{fmt.Sprintf("h-%d", 1000+g)},
				cards:   func() []string { return cards },
				newCard: func() string {
					mu.Lock()
					defer mu.Unlock()
					created++
					return fmt.Sprintf("new-%d-%d", g, created)
				},
				tokens: map[string]board.ClaimToken{},
			}
			for range 150 {
				if err := w.step(t); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	checkIndexes(t, s)
	checkListings(t, s, clock.Now())

	// The event log: seq strictly increasing without gaps, and per card the
	// claimed epochs count up by one from 1 — the local fence is a counter
	// (DESIGN.md#twin-epoch) and no concurrent acquisition may reuse or skip a value.
	evs, err := s.Events(t.Context(), board.EventsParams{After: 0, Limit: 0})
	if err != nil {
		t.Fatal(err)
	}
	lastEpoch := map[string]int64{}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d, want %d", i, ev.Seq, i+1)
		}
		if ev.Type == board.EventClaimed {
			if want := lastEpoch[ev.Card] + 1; ev.Data.Epoch != want {
				t.Errorf("card %s claimed at epoch %d, want %d", ev.Card, ev.Data.Epoch, want)
			}
			lastEpoch[ev.Card] = ev.Data.Epoch
		}
	}
	if len(lastEpoch) < nCards/2 {
		t.Errorf("only %d cards were ever claimed; the workload did not exercise claims", len(lastEpoch))
	}
	for _, r := range allCards(t, s) {
		if r.ClaimEpoch != lastEpoch[r.ID] {
			t.Errorf("card %s epoch %d, want %d (its last claimed event)", r.ID, r.ClaimEpoch, lastEpoch[r.ID])
		}
	}
}
