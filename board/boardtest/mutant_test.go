package boardtest_test

// The suite is only worth running if it can fail. These tests wrap a real
// store (the bbolt twin) in deliberately broken decorators — each one
// breaks one rule of the contract — run the suite against each mutant in a
// child test process, and require that the child fails in the subtests that
// pin the broken rule.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

const mutantEnv = "LEASEKEEPER_BOARDTEST_MUTANT"

// fenceBypass accepts SetLastRunOwned with any token by presenting the
// card's current one.
type fenceBypass struct{ board.Store }

func (m fenceBypass) SetLastRunOwned(ctx context.Context, p board.SetLastRunOwnedParams) error {
	if c, err := m.Store.GetCard(ctx, board.GetCardParams{ID: p.Card}); err == nil && c.Claimed() {
		p.Token = c.Token()
	}
	return m.Store.SetLastRunOwned(ctx, p)
}

// claimSteals takes a held card from its holder instead of refusing.
type claimSteals struct{ board.Store }

func (m claimSteals) Claim(ctx context.Context, r board.ClaimParams) (board.Card, error) {
	c, err := m.Store.Claim(ctx, r)
	if ce, ok := board.AsClaimConflict(err); ok {
		if err := m.Store.Release(ctx, board.ReleaseParams{Card: r.Card, Marker: ce.Holder, Actor: "mutant"}); err != nil {
			return board.Card{}, err
		}
		return m.Store.Claim(ctx, r)
	}
	return c, err
}

// reclaimIgnoresLease transfers live leases too.
type reclaimIgnoresLease struct{ board.Store }

func (m reclaimIgnoresLease) ReclaimExpired(ctx context.Context, r board.ReclaimExpiredParams) (board.Card, error) {
	r.Cutoff = r.Cutoff.Add(1000 * time.Hour)
	return m.Store.ReclaimExpired(ctx, r)
}

// anonymousConflict refuses claims without naming the holder.
type anonymousConflict struct{ board.Store }

func (m anonymousConflict) Claim(ctx context.Context, r board.ClaimParams) (board.Card, error) {
	c, err := m.Store.Claim(ctx, r)
	if errors.Is(err, board.ErrClaimConflict) {
		return c, fmt.Errorf("card %s: %w", r.Card, board.ErrClaimConflict)
	}
	return c, err
}

// sinkLeaks lets SetState leave a terminal state by going through Reopen.
type sinkLeaks struct{ board.Store }

func (m sinkLeaks) SetState(ctx context.Context, mv board.MoveParams) error {
	err := m.Store.SetState(ctx, mv)
	if errors.Is(err, board.ErrTerminalStateExit) {
		return m.Store.Reopen(ctx, mv)
	}
	return err
}

// pruneIgnoresDryRun deletes on a dry run.
type pruneIgnoresDryRun struct{ board.Store }

func (m pruneIgnoresDryRun) Prune(ctx context.Context, p board.PruneParams) (board.PruneResult, error) {
	dry := p.DryRun
	p.DryRun = false
	res, err := m.Store.Prune(ctx, p)
	res.DryRun = dry
	return res, err
}

// eventsSkipPruned serves a reader positioned below what a prune deleted
// from what the log keeps: the silent gap DESIGN.md#retention forbids.
type eventsSkipPruned struct{ board.Store }

func (m eventsSkipPruned) Events(ctx context.Context, p board.EventsParams) ([]board.Event, error) {
	limit := p.Limit
	evs, err := m.Store.Events(ctx, p)
	if errors.Is(err, board.ErrEventsPruned) {
		return m.Store.Events(ctx, board.EventsParams{After: 0, Limit: limit})
	}
	return evs, err
}

// reopenLastBlockerOnly applies the old Reopen guard: a dependent held the
// blocker only while it was working on the promotion this blocker's
// completion made (PromotedBy), so an earlier blocker, a dependent moved on
// by hand and a finished dependent all let the reopen through. The real
// store refuses those, so the mutant gets its way by parking the
// dependents in waiting_deps for the length of the reopen and putting
// them back afterwards.
type reopenLastBlockerOnly struct{ board.Store }

func (m reopenLastBlockerOnly) Reopen(ctx context.Context, mv board.MoveParams) error {
	err := m.Store.Reopen(ctx, mv)
	if !errors.Is(err, board.ErrTransitionRejected) {
		return err
	}
	deps, derr := m.Store.Dependents(ctx, board.DependentsParams{ID: mv.Card})
	if derr != nil {
		return err
	}
	b := board.DefaultBoard(true) // the board the suite opens the local twin with
	var parked []board.Card
	for _, d := range deps {
		if d.PromotedBy == mv.Card && !b.IsTerminal(d.State) {
			return err // the old guard refuses too
		}
		if d.State != board.StateWaitingDeps {
			parked = append(parked, d)
		}
	}
	if len(parked) == 0 {
		return err // refused for another reason
	}
	for _, d := range parked {
		park := m.Store.SetState
		if b.IsTerminal(d.State) {
			park = m.Store.Reopen
		}
		if perr := park(ctx, board.MoveParams{Card: d.ID, To: board.StateWaitingDeps, Actor: "mutant"}); perr != nil {
			return perr
		}
	}
	err = m.Store.Reopen(ctx, mv)
	for _, d := range parked {
		if rerr := m.Store.SetState(ctx, board.MoveParams{Card: d.ID, To: d.State, Actor: "mutant"}); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// countMissesRecoveryClaims counts only worker claims as claimed, as a
// store counting an index of worker claims would.
type countMissesRecoveryClaims struct{ board.Store }

func (m countMissesRecoveryClaims) CountCards(ctx context.Context) (board.CardCounts, error) {
	c, err := m.Store.CountCards(ctx)
	if err != nil {
		return c, err
	}
	rec, err := m.Store.ListCards(ctx, board.ListCardsParams{RecoveryOnly: true})
	c.Claimed -= len(rec)
	return c, err
}

// recoveryListsClaimed ignores RecoveryOnly: it lists every claimed card,
// as a store without a recovery index might.
type recoveryListsClaimed struct{ board.Store }

func (m recoveryListsClaimed) ListCards(ctx context.Context, f board.ListCardsParams) ([]board.Card, error) {
	if f.RecoveryOnly {
		f.RecoveryOnly, f.ClaimedOnly = false, true
	}
	return m.Store.ListCards(ctx, f)
}

// releaseExpiredByMarker releases an abandoned claim on its marker alone,
// as the recovery sweep once did: an owner that re-took the card loses it.
type releaseExpiredByMarker struct{ board.Store }

func (m releaseExpiredByMarker) ReleaseExpired(ctx context.Context, r board.ReleaseExpiredParams) error {
	if c, err := m.Store.GetCard(ctx, board.GetCardParams{ID: r.Card}); err == nil && !c.Claimed() {
		return board.Conflict(r.Card, "", c.ClaimEpoch)
	}
	return m.Store.Release(ctx, board.ReleaseParams{Card: r.Card, Marker: r.Prev.Marker, Actor: r.Actor})
}

// listingRestarts ignores the position and lists from the oldest lease on
// every page, so kept cards at the head would starve the rest.
type listingRestarts struct{ board.Store }

func (m listingRestarts) ListExpiredClaimCandidates(ctx context.Context, q board.ListExpiredClaimCandidatesParams) (board.ListExpiredClaimCandidatesResult, error) {
	q.After = ""
	return m.Store.ListExpiredClaimCandidates(ctx, q)
}

// startMintsOnRefusal claims and releases a card in a sink before refusing
// its Start: the refusal bumps the epoch and logs events.
type startMintsOnRefusal struct{ board.Store }

func (m startMintsOnRefusal) Start(ctx context.Context, r board.StartParams) (board.StartResult, error) {
	st, err := m.Store.Start(ctx, r)
	if errors.Is(err, board.ErrTerminalStateExit) {
		if card, cerr := m.Store.Claim(ctx, board.ClaimParams{Card: r.Card, Marker: r.Marker, Lease: r.Lease}); cerr == nil {
			_ = m.Store.ReleaseOwned(ctx, board.OwnedParams{Card: r.Card, Token: card.Token()})
		}
	}
	return st, err
}

// finishWithoutRunFence files any run the caller names: it points the card
// at it and reopens a run that already has its verdict before finishing.
type finishWithoutRunFence struct{ board.Store }

func (m finishWithoutRunFence) Finish(ctx context.Context, r board.FinishParams) (board.FinishResult, error) {
	_ = m.Store.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: r.Card, Token: r.Token, RunID: r.RunID})
	if run, err := m.Store.GetRun(ctx, board.GetRunParams{ID: r.RunID}); err == nil && run.Status.Final() {
		running := board.RunRunning
		_, _ = m.Store.UpdateRun(ctx, board.UpdateRunParams{ID: r.RunID, Token: r.Token, Status: &running})
	}
	return m.Store.Finish(ctx, r)
}

// updateRunIgnoresToken writes a run under whatever claim holds its card.
type updateRunIgnoresToken struct{ board.Store }

func (m updateRunIgnoresToken) UpdateRun(ctx context.Context, u board.UpdateRunParams) (board.Run, error) {
	if run, err := m.Store.GetRun(ctx, board.GetRunParams{ID: u.ID}); err == nil {
		if c, err := m.Store.GetCard(ctx, board.GetCardParams{ID: run.Card}); err == nil && c.Claimed() {
			u.Token = c.Token()
		}
	}
	return m.Store.UpdateRun(ctx, u)
}

// disownEndsTheLease marks a silent holder's claim and ends its lease as
// well: the card would be free before the deadline the holder still trusts.
type disownEndsTheLease struct{ board.Store }

func (m disownEndsTheLease) DisownClaimOwned(ctx context.Context, p board.OwnedParams) error {
	if err := m.Store.DisownClaimOwned(ctx, p); err != nil {
		return err
	}
	return m.Store.ExpireClaimOwned(ctx, p)
}

// releaseLeavesRunOpen releases only the claim, as the expiry sweep does:
// the holder's run is left open and the card where it was.
type releaseLeavesRunOpen struct{ board.Store }

func (m releaseLeavesRunOpen) claimOnly(ctx context.Context, card string, tok board.ClaimToken) error {
	if err := m.Store.ExpireClaimOwned(ctx, board.OwnedParams{Card: card, Token: tok}); err != nil {
		return err
	}
	now, err := m.Store.Now(ctx)
	if err != nil {
		return err
	}
	return m.Store.ReleaseExpired(ctx, board.ReleaseExpiredParams{Card: card, Prev: tok, Cutoff: now, Actor: "mutant"})
}

func (m releaseLeavesRunOpen) Release(ctx context.Context, p board.ReleaseParams) error {
	card, marker := p.Card, p.Marker
	if c, err := m.Store.GetCard(ctx, board.GetCardParams{ID: card}); err == nil && c.Claim == marker {
		return m.claimOnly(ctx, card, c.Token())
	}
	return m.Store.Release(ctx, p)
}

func (m releaseLeavesRunOpen) ReleaseOwned(ctx context.Context, p board.OwnedParams) error {
	card, tok := p.Card, p.Token
	if c, err := m.Store.GetCard(ctx, board.GetCardParams{ID: card}); err == nil && c.Token() == tok {
		return m.claimOnly(ctx, card, tok)
	}
	return m.Store.ReleaseOwned(ctx, p)
}

// claimPassesBlockers takes a card waiting on its blockers when it is
// named, as the stores did before the rule: it lets the card out of
// waiting_deps, then claims it.
type claimPassesBlockers struct{ board.Store }

func (m claimPassesBlockers) letOut(ctx context.Context, card string) error {
	return m.Store.SetState(ctx, board.MoveParams{Card: card, To: board.StateReady, Actor: "mutant"})
}

func (m claimPassesBlockers) Claim(ctx context.Context, r board.ClaimParams) (board.Card, error) {
	c, err := m.Store.Claim(ctx, r)
	if errors.Is(err, board.ErrWaitingOnBlockers) {
		if err := m.letOut(ctx, r.Card); err != nil {
			return board.Card{}, err
		}
		return m.Store.Claim(ctx, r)
	}
	return c, err
}

func (m claimPassesBlockers) Start(ctx context.Context, r board.StartParams) (board.StartResult, error) {
	st, err := m.Store.Start(ctx, r)
	if errors.Is(err, board.ErrWaitingOnBlockers) {
		if err := m.letOut(ctx, r.Card); err != nil {
			return board.StartResult{}, err
		}
		return m.Store.Start(ctx, r)
	}
	return st, err
}

var mutants = map[string]func(board.Store) board.Store{
	"claimPassesBlockers":       func(s board.Store) board.Store { return claimPassesBlockers{s} },
	"startMintsOnRefusal":       func(s board.Store) board.Store { return startMintsOnRefusal{s} },
	"finishWithoutRunFence":     func(s board.Store) board.Store { return finishWithoutRunFence{s} },
	"updateRunIgnoresToken":     func(s board.Store) board.Store { return updateRunIgnoresToken{s} },
	"releaseLeavesRunOpen":      func(s board.Store) board.Store { return releaseLeavesRunOpen{s} },
	"disownEndsTheLease":        func(s board.Store) board.Store { return disownEndsTheLease{s} },
	"releaseExpiredByMarker":    func(s board.Store) board.Store { return releaseExpiredByMarker{s} },
	"listingRestarts":           func(s board.Store) board.Store { return listingRestarts{s} },
	"fenceBypass":               func(s board.Store) board.Store { return fenceBypass{s} },
	"claimSteals":               func(s board.Store) board.Store { return claimSteals{s} },
	"reclaimIgnoresLease":       func(s board.Store) board.Store { return reclaimIgnoresLease{s} },
	"anonymousConflict":         func(s board.Store) board.Store { return anonymousConflict{s} },
	"sinkLeaks":                 func(s board.Store) board.Store { return sinkLeaks{s} },
	"recoveryListsClaimed":      func(s board.Store) board.Store { return recoveryListsClaimed{s} },
	"countMissesRecoveryClaims": func(s board.Store) board.Store { return countMissesRecoveryClaims{s} },
	"reopenLastBlockerOnly":     func(s board.Store) board.Store { return reopenLastBlockerOnly{s} },
	"pruneIgnoresDryRun":        func(s board.Store) board.Store { return pruneIgnoresDryRun{s} },
	"eventsSkipPruned":          func(s board.Store) board.Store { return eventsSkipPruned{s} },
}

func mutantHarness(t *testing.T) boardtest.Harness {
	wrap, ok := mutants[os.Getenv(mutantEnv)]
	if !ok {
		t.Skipf("runs only as a child of TestSuiteCatchesMutants (%s names the mutant)", mutantEnv)
	}
	return boardtest.Harness{Open: func(t *testing.T, cfg boardtest.Config) board.Store {
		s, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{Board: cfg.Board, Clock: cfg.Clock, LockTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return wrap(s)
	}}
}

func TestMutantExercise(t *testing.T) { boardtest.Exercise(t, mutantHarness(t)) }

func TestMutantStress(t *testing.T) {
	boardtest.StressFencing(t, mutantHarness(t), boardtest.StressOptions{Cards: 2, Workers: 6, Duration: 2 * time.Second, Ops: 800})
}

func TestSuiteCatchesMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("re-runs the suite once per mutant")
	}
	cases := []struct {
		mutant string
		run    string   // -test.run pattern for the child
		fails  []string // subtests the child must report as failed
	}{
		{"fenceBypass", "TestMutantExercise/Owner/StaleTokenRefused/SameMarkerEarlierEpoch|TestMutantStress",
			[]string{"TestMutantExercise/Owner/StaleTokenRefused/SameMarkerEarlierEpoch/SetLastRunOwned", "TestMutantStress"}},
		{"claimSteals", "TestMutantExercise/Claims/(OtherMarker|ExpiredClaim)|TestMutantStress",
			[]string{"TestMutantExercise/Claims/OtherMarkerIsConflictNamingHolder", "TestMutantExercise/Claims/ExpiredClaimIsNotTakenByClaim", "TestMutantStress"}},
		{"reclaimIgnoresLease", "TestMutantExercise/Watchdog/TransferRefused|TestMutantStress",
			[]string{"TestMutantExercise/Watchdog/TransferRefused/CutoffBeforeLease", "TestMutantExercise/Watchdog/TransferRefusedForLiveLease", "TestMutantStress"}},
		{"anonymousConflict", "TestMutantExercise/Claims/OtherMarker",
			[]string{"TestMutantExercise/Claims/OtherMarkerIsConflictNamingHolder"}},
		{"sinkLeaks", "TestMutantExercise/States/TerminalIsASink/SetState/",
			[]string{"TestMutantExercise/States/TerminalIsASink/SetState/doneToready"}},
		{"releaseExpiredByMarker", "TestMutantExercise/Expired/ReleaseExpired",
			[]string{"TestMutantExercise/Expired/ReleaseExpiredCarriesTheWholePrecondition"}},
		{"listingRestarts", "TestMutantExercise/Expired/ExpiredListingPages",
			[]string{"TestMutantExercise/Expired/ExpiredListingPages"}},
		{"countMissesRecoveryClaims", "TestMutantExercise/Watchdog/CountCards",
			[]string{"TestMutantExercise/Watchdog/CountCards"}},
		{"recoveryListsClaimed", "TestMutantExercise/Watchdog/RecoveryOnlyListing",
			[]string{"TestMutantExercise/Watchdog/RecoveryOnlyListing"}},
		{"startMintsOnRefusal", "TestMutantExercise/Lifecycle/RefusalsMintNothing",
			[]string{"TestMutantExercise/Lifecycle/RefusalsMintNothing"}},
		{"finishWithoutRunFence", "TestMutantExercise/Lifecycle/FinishFenced/",
			[]string{"TestMutantExercise/Lifecycle/FinishFenced/RunWithAVerdict", "TestMutantExercise/Lifecycle/FinishFenced/NotTheRecordedRun"}},
		{"updateRunIgnoresToken", "TestMutantExercise/Lifecycle/RunWritesFenced/UpdateRunWorkerToken",
			[]string{"TestMutantExercise/Lifecycle/RunWritesFenced/UpdateRunWorkerToken"}},
		{"releaseLeavesRunOpen", "TestMutantExercise/Lifecycle/ReleaseHandsTheCardBack/",
			[]string{"TestMutantExercise/Lifecycle/ReleaseHandsTheCardBack/Release", "TestMutantExercise/Lifecycle/ReleaseHandsTheCardBack/ReleaseOwned"}},
		{"disownEndsTheLease", "TestMutantExercise/Owner/DisownMarks",
			[]string{"TestMutantExercise/Owner/DisownMarksTheClaimAlone"}},
		{"claimPassesBlockers", "TestMutantExercise/Blockers/",
			[]string{"TestMutantExercise/Blockers/ClaimByIDOfAWaitingCardIsRefused", "TestMutantExercise/Blockers/ParkedInWaitingDepsWithNothingOutstanding"}},
		{"pruneIgnoresDryRun", "TestMutantExercise/Retention/PruneIsBounded",
			[]string{"TestMutantExercise/Retention/PruneIsBoundedAndDryRunWritesNothing"}},
		{"eventsSkipPruned", "TestMutantExercise/Retention/PrunedEvents",
			[]string{"TestMutantExercise/Retention/PrunedEventsAreRefusedNotSkipped"}},
		{"reopenLastBlockerOnly", "TestMutantExercise/States/ReopenGuard/",
			[]string{"TestMutantExercise/States/ReopenGuard/EarlierBlocker", "TestMutantExercise/States/ReopenGuard/DependentMovedByHand", "TestMutantExercise/States/ReopenGuard/FinishedDependent"}},
	}
	for _, tc := range cases {
		t.Run(tc.mutant, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", tc.run, "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), mutantEnv+"="+tc.mutant)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed against mutant %s (err %v), want it to fail:\n%s", tc.mutant, err, out)
			}
			for _, name := range tc.fails {
				if !strings.Contains(string(out), "--- FAIL: "+name+" ") {
					t.Errorf("mutant %s: subtest %s did not fail\n%s", tc.mutant, name, tail(out, 60))
				}
			}
		})
	}
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
