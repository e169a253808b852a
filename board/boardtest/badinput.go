package boardtest

import (
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

func exerciseBadInput(t *testing.T, h Harness) {
	longLabel := strings.Repeat("x", board.MaxLabelBytes+1)
	cases := []struct {
		name string
		do   func(e *env, tok board.ClaimToken) error
		want error
	}{
		// Unknown card.
		{"GetCardUnknown", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.GetCard(e.ctx, board.GetCardParams{ID: "ghost"})
			return err
		}, board.ErrNotFound},
		{"ClaimUnknownCard", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.Claim(e.ctx, board.ClaimParams{Card: "ghost", Marker: markerB, Lease: lease})
			return err
		}, board.ErrNotFound},
		{"SetStateUnknownCard", func(e *env, _ board.ClaimToken) error {
			return e.s.SetState(e.ctx, board.MoveParams{Card: "ghost", To: board.StateReady})
		}, board.ErrNotFound},
		{"SetStateFromUnknownCard", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.SetStateFrom(e.ctx, board.MoveParams{Card: "ghost", From: board.StateReady, To: board.StateBacklog})
			return err
		}, board.ErrNotFound},
		{"ReopenUnknownCard", func(e *env, _ board.ClaimToken) error {
			return e.s.Reopen(e.ctx, board.MoveParams{Card: "ghost", To: board.StateReady})
		}, board.ErrNotFound},
		{"AdjustLabelsUnknownCard", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.AdjustLabels(e.ctx, board.AdjustLabelsParams{Card: "ghost", Add: []string{"a"}})
			return err
		}, board.ErrNotFound},
		{"SetLabelsUnknownCard", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.SetLabels(e.ctx, board.SetLabelsParams{Card: "ghost", Labels: []string{"a"}, Actor: ""})
			return err
		}, board.ErrNotFound},
		{"OwnerWriteUnknownCard", func(e *env, tok board.ClaimToken) error {
			return e.s.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "ghost", Token: tok, RunID: "r"})
		}, board.ErrNotFound},
		{"ReleaseUnknownCard", func(e *env, _ board.ClaimToken) error {
			return e.s.Release(e.ctx, board.ReleaseParams{Card: "ghost", Marker: markerA, Actor: "uid:0"})
		}, board.ErrNotFound},
		{"ReclaimUnknownCard", func(e *env, tok board.ClaimToken) error {
			_, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "ghost", Prev: tok, RecoveryMarker: recovery, Cutoff: e.clock.Now(), Lease: lease})
			return err
		}, board.ErrNotFound},
		{"DependentsOfUnknownCard", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.Dependents(e.ctx, board.DependentsParams{ID: "ghost"})
			return err
		}, board.ErrNotFound},

		// Unknown state.
		{"SetStateUnknownState", func(e *env, _ board.ClaimToken) error {
			return e.s.SetState(e.ctx, board.MoveParams{Card: "c1", To: "limbo"})
		}, board.ErrInvalidArgument},
		{"SetStateFromUnknownTarget", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.SetStateFrom(e.ctx, board.MoveParams{Card: "c1", From: board.StateReady, To: "limbo"})
			return err
		}, board.ErrInvalidArgument},
		{"SetStateFromUnknownSource", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.SetStateFrom(e.ctx, board.MoveParams{Card: "c1", From: "limbo", To: board.StateBacklog})
			return err
		}, board.ErrInvalidArgument},
		{"SetStateOwnedUnknownState", func(e *env, tok board.ClaimToken) error {
			_, err := e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: "c1", Token: tok, To: "limbo"})
			return err
		}, board.ErrInvalidArgument},
		{"ReopenUnknownState", func(e *env, _ board.ClaimToken) error {
			return e.s.Reopen(e.ctx, board.MoveParams{Card: "c2", To: "limbo"})
		}, board.ErrInvalidArgument},
		{"CreateCardUnknownState", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: "new", State: "limbo"})
			return err
		}, board.ErrInvalidArgument},

		// Markers and tokens.
		{"ClaimEmptyMarker", claimWith(""), board.ErrInvalidArgument},
		{"ClaimMarkerWithoutPid", claimWith("worker"), board.ErrInvalidArgument},
		{"ClaimMarkerPidOne", claimWith("worker-1"), board.ErrInvalidArgument},
		{"ClaimMarkerPidNotNumber", claimWith("worker-abc"), board.ErrInvalidArgument},
		{"ClaimMarkerNoHost", claimWith("-4242"), board.ErrInvalidArgument},
		{"ClaimMarkerControlChar", claimWith("wor\x00ker-4242"), board.ErrInvalidArgument},
		{"ClaimNextMalformedMarker", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: "nope", Lease: lease})
			return err
		}, board.ErrInvalidArgument},
		{"ReleaseEmptyMarker", func(e *env, _ board.ClaimToken) error {
			return e.s.Release(e.ctx, board.ReleaseParams{Card: "c1", Marker: "", Actor: "uid:0"})
		}, board.ErrInvalidArgument},
		{"ReclaimMalformedRecoveryMarker", func(e *env, tok board.ClaimToken) error {
			_, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: tok, RecoveryMarker: "reaper:", Cutoff: e.clock.Now(), Lease: lease})
			return err
		}, board.ErrInvalidArgument},
		{"ReclaimZeroPrev", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c1", RecoveryMarker: recovery, Cutoff: e.clock.Now(), Lease: lease})
			return err
		}, board.ErrInvalidArgument},
		{"SetStateOwnedZeroToken", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: "c1", To: board.StateBacklog})
			return err
		}, board.ErrInvalidArgument},
		{"SetLastRunOwnedZeroToken", func(e *env, _ board.ClaimToken) error {
			return e.s.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: board.ClaimToken{}, RunID: "r"})
		}, board.ErrInvalidArgument},
		{"SetAwaitingInputOwnedZeroToken", func(e *env, _ board.ClaimToken) error {
			return e.s.SetAwaitingInputOwned(e.ctx, board.SetAwaitingInputOwnedParams{Card: "c1", Token: board.ClaimToken{}, Awaiting: true})
		}, board.ErrInvalidArgument},
		{"SetGaveUpOwnedZeroToken", func(e *env, _ board.ClaimToken) error {
			return e.s.SetGaveUpOwned(e.ctx, board.SetGaveUpOwnedParams{Card: "c1", Token: board.ClaimToken{}, GaveUp: &board.GaveUp{Reason: "x"}})
		}, board.ErrInvalidArgument},
		{"ExpireClaimOwnedZeroToken", func(e *env, _ board.ClaimToken) error {
			return e.s.ExpireClaimOwned(e.ctx, board.OwnedParams{Card: "c1", Token: board.ClaimToken{}})
		}, board.ErrInvalidArgument},
		{"DisownClaimOwnedZeroToken", func(e *env, _ board.ClaimToken) error {
			return e.s.DisownClaimOwned(e.ctx, board.OwnedParams{Card: "c1", Token: board.ClaimToken{}})
		}, board.ErrInvalidArgument},
		{"ReleaseOwnedZeroToken", func(e *env, _ board.ClaimToken) error {
			return e.s.ReleaseOwned(e.ctx, board.OwnedParams{Card: "c1", Token: board.ClaimToken{}})
		}, board.ErrInvalidArgument},
		{"OwnerWriteMalformedTokenMarker", func(e *env, tok board.ClaimToken) error {
			return e.s.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: board.ClaimToken{Marker: "garbage", Epoch: tok.Epoch}, RunID: "r"})
		}, board.ErrInvalidArgument},

		// Cards: ids, duplicates, dependencies.
		{"CreateDuplicateID", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: "c1"})
			return err
		}, board.ErrInvalidArgument},
		{"CreateEmptyID", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: ""})
			return err
		}, board.ErrInvalidArgument},
		{"CreateIDWithControlChar", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: "bad\nid"})
			return err
		}, board.ErrInvalidArgument},
		{"CreateIDWithSurroundingSpace", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: " new "})
			return err
		}, board.ErrInvalidArgument},
		{"CreateDependsOnItself", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: "loop", DependsOn: []string{"c1", "loop"}})
			return err
		}, board.ErrInvalidArgument},
		{"CreateDependsOnUnknown", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: "new", DependsOn: []string{"c1", "ghost"}})
			return err
		}, board.ErrInvalidArgument},

		// Labels.
		{"CreateLabelControlChar", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: "new", Labels: []string{"ok", "bad\x07"}})
			return err
		}, board.ErrInvalidArgument},
		{"CreateLabelTooLong", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: "new", Labels: []string{longLabel}})
			return err
		}, board.ErrInvalidArgument},
		{"AdjustLabelsControlChar", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.AdjustLabels(e.ctx, board.AdjustLabelsParams{Card: "c1", Add: []string{"ok", "tab\there"}})
			return err
		}, board.ErrInvalidArgument},
		{"AdjustLabelsRemoveTooLong", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.AdjustLabels(e.ctx, board.AdjustLabelsParams{Card: "c1", Add: []string{"ok"}, Remove: []string{longLabel}})
			return err
		}, board.ErrInvalidArgument},
		{"SetLabelsTooLong", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.SetLabels(e.ctx, board.SetLabelsParams{Card: "c1", Labels: []string{"ok", longLabel}, Actor: ""})
			return err
		}, board.ErrInvalidArgument},
		{"SetLabelsControlChar", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.SetLabels(e.ctx, board.SetLabelsParams{Card: "c1", Labels: []string{"esc\x1b"}, Actor: ""})
			return err
		}, board.ErrInvalidArgument},

		// Names that are not UTF-8 or not names at all (NUL, over the
		// length limit): the caller's mistake, refused before storage for
		// reads as for writes. A store behind a process boundary must say
		// so too, rather than fail the call in transit: a protobuf string
		// cannot carry such bytes at all.
		{"GetCardNotUTF8", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.GetCard(e.ctx, board.GetCardParams{ID: "c1\xff"})
			return err
		}, board.ErrInvalidArgument},
		{"GetCardOverlongEncoding", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.GetCard(e.ctx, board.GetCardParams{ID: "\xc0\xaf"})
			return err
		}, board.ErrInvalidArgument},
		{"GetCardNUL", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.GetCard(e.ctx, board.GetCardParams{ID: "c1\x00"})
			return err
		}, board.ErrInvalidArgument},
		{"GetCardTooLong", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.GetCard(e.ctx, board.GetCardParams{ID: strings.Repeat("c", board.MaxIDBytes+1)})
			return err
		}, board.ErrInvalidArgument},
		{"DependentsNotUTF8", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.Dependents(e.ctx, board.DependentsParams{ID: "\xff"})
			return err
		}, board.ErrInvalidArgument},
		{"ListCardsStateNotUTF8", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.ListCards(e.ctx, board.ListCardsParams{State: "ready\xff"})
			return err
		}, board.ErrInvalidArgument},
		{"GetRunNotUTF8", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.GetRun(e.ctx, board.GetRunParams{ID: "\xc0"})
			return err
		}, board.ErrInvalidArgument},
		{"UpdateRunIDNotUTF8", func(e *env, tok board.ClaimToken) error {
			st := board.RunFailed
			_, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r\xff", Token: tok, Status: &st})
			return err
		}, board.ErrInvalidArgument},
		{"UpdateRunCheckpointNotUTF8", func(e *env, tok board.ClaimToken) error {
			cp := "step \xe0\x80"
			_, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "ghost", Token: tok, Checkpoint: &cp})
			return err
		}, board.ErrInvalidArgument},
		{"CreateRunCheckpointNotUTF8", func(e *env, tok board.ClaimToken) error {
			_, err := e.s.CreateRun(e.ctx, board.CreateRunParams{Token: tok, Run: board.Run{ID: "r9", Card: "c1", Checkpoint: "\xc3"}})
			return err
		}, board.ErrInvalidArgument},
		{"ClaimCardNotUTF8", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.Claim(e.ctx, board.ClaimParams{Card: "c2\xff", Marker: markerB, Lease: lease})
			return err
		}, board.ErrInvalidArgument},
		{"ClaimMarkerNotUTF8", claimWith("wor\xffker-4242"), board.ErrInvalidArgument},
		{"CreateIDNotUTF8", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: "new\xff"})
			return err
		}, board.ErrInvalidArgument},
		{"CreateTitleNotUTF8", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: "new", Title: "caf\xc3"})
			return err
		}, board.ErrInvalidArgument},
		{"CreateStateNotUTF8", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: "new", State: "ready\xff"})
			return err
		}, board.ErrInvalidArgument},
		{"CreateLabelNotUTF8", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: "new", Labels: []string{"ok", "\xff"}})
			return err
		}, board.ErrInvalidArgument},
		{"CreateBlockerNotUTF8", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: "new", DependsOn: []string{"c1\xff"}})
			return err
		}, board.ErrInvalidArgument},
		{"SetStateTargetNotUTF8", func(e *env, _ board.ClaimToken) error {
			return e.s.SetState(e.ctx, board.MoveParams{Card: "c1", To: "done\xff"})
		}, board.ErrInvalidArgument},
		{"SetStateReasonNotUTF8", func(e *env, _ board.ClaimToken) error {
			return e.s.SetState(e.ctx, board.MoveParams{Card: "c1", To: board.StateBacklog, Reason: "\xff"})
		}, board.ErrInvalidArgument},
		{"ReopenTargetNotUTF8", func(e *env, _ board.ClaimToken) error {
			return e.s.Reopen(e.ctx, board.MoveParams{Card: "c2", To: "\xc0"})
		}, board.ErrInvalidArgument},
		{"AdjustLabelsNotUTF8", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.AdjustLabels(e.ctx, board.AdjustLabelsParams{Card: "c1", Add: []string{"ok", "\xff"}})
			return err
		}, board.ErrInvalidArgument},
		{"SetLabelsNotUTF8", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.SetLabels(e.ctx, board.SetLabelsParams{Card: "c1", Labels: []string{"\xed\xa0\x80"}, Actor: ""})
			return err
		}, board.ErrInvalidArgument},
		{"SetStateOwnedTargetNotUTF8", func(e *env, tok board.ClaimToken) error {
			_, err := e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: "c1", Token: tok, To: "done\xff"})
			return err
		}, board.ErrInvalidArgument},
		{"SetLastRunOwnedRunIDNotUTF8", func(e *env, tok board.ClaimToken) error {
			return e.s.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: "r\xff"})
		}, board.ErrInvalidArgument},
		{"SetGaveUpOwnedReasonNotUTF8", func(e *env, tok board.ClaimToken) error {
			return e.s.SetGaveUpOwned(e.ctx, board.SetGaveUpOwnedParams{Card: "c1", Token: tok, GaveUp: &board.GaveUp{Reason: "stuck \xff"}})
		}, board.ErrInvalidArgument},
		{"SetGaveUpOwnedRunIDNotUTF8", func(e *env, tok board.ClaimToken) error {
			return e.s.SetGaveUpOwned(e.ctx, board.SetGaveUpOwnedParams{Card: "c1", Token: tok, GaveUp: &board.GaveUp{Reason: "stuck", RunID: "r\xc0"}})
		}, board.ErrInvalidArgument},
		{"ReleaseActorNotUTF8", func(e *env, _ board.ClaimToken) error {
			return e.s.Release(e.ctx, board.ReleaseParams{Card: "c1", Marker: markerA, Actor: "uid:\xff"})
		}, board.ErrInvalidArgument},
		{"ListExpiredPositionNotUTF8", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.ListExpiredClaimCandidates(e.ctx, board.ListExpiredClaimCandidatesParams{Cutoff: e.clock.Now(), Limit: 10, After: "c\xff"})
			return err
		}, board.ErrInvalidArgument},
		{"ClaimNextRouteLabelEmpty", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerB, Lease: lease, Labels: []string{"gpu", ""}})
			return err
		}, board.ErrInvalidArgument},
		{"ClaimNextRouteLabelTwice", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerB, Lease: lease, Labels: []string{"gpu", "gpu"}})
			return err
		}, board.ErrInvalidArgument},
		{"ClaimNextTooManyRouteLabels", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerB, Lease: lease,
				Labels: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}})
			return err
		}, board.ErrInvalidArgument},
		{"ClaimNextRouteLabelNotUTF8", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerB, Lease: lease, Labels: []string{"g\xff"}})
			return err
		}, board.ErrInvalidArgument},
		{"ListExpiredShareOfARecoveryMarker", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.ListExpiredClaimCandidates(e.ctx, board.ListExpiredClaimCandidatesParams{Cutoff: e.clock.Now(), Limit: 10,
				Share: &board.ReaperShare{Reaper: board.RecoveryMarker(markerA), Interval: time.Minute}})
			return err
		}, board.ErrInvalidArgument},
		{"ListExpiredShareWithNoInterval", func(e *env, _ board.ClaimToken) error {
			_, err := e.s.ListExpiredClaimCandidates(e.ctx, board.ListExpiredClaimCandidatesParams{Cutoff: e.clock.Now(), Limit: 10,
				Share: &board.ReaperShare{Reaper: markerA}})
			return err
		}, board.ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := open(t, h)
			// c1: a claimed card in the pool; c2: a card in a sink.
			e.create(board.CreateCardParams{ID: "c1", State: board.StateReady, Labels: []string{"keep"}})
			tok := e.claim("c1", markerA)
			e.card("c2", board.StateReady)
			e.setState("c2", board.StateDone)
			before := []board.Card{e.get("c1"), e.get("c2")}
			evBefore := e.allEvents()

			err := tc.do(e, tok)
			wantErr(t, err, tc.want, tc.name)
			for _, c := range before {
				e.unchanged(c, tc.name)
			}
			if evAfter := e.allEvents(); len(evAfter) != len(evBefore) {
				t.Errorf("%s wrote events: %s", tc.name, fmtEvents(evAfter[len(evBefore):]))
			}
			list, lerr := e.s.ListCards(e.ctx, board.ListCardsParams{})
			if lerr != nil {
				t.Fatalf("ListCards: %v", lerr)
			}
			if got := ids(list); len(got) != 2 {
				t.Errorf("cards after %s = %q, want only c1 and c2", tc.name, got)
			}
		})
	}
}

func claimWith(marker string) func(e *env, tok board.ClaimToken) error {
	return func(e *env, _ board.ClaimToken) error {
		_, err := e.s.Claim(e.ctx, board.ClaimParams{Card: "c2", Marker: marker, Lease: lease})
		return err
	}
}
