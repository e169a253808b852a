package plugins

import (
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// The conversions of each verb's request and reply, named after the
// message: to<Message> builds it from the verb's Go value, from<Message>
// reads it back. The generated verbs (verbs_gen.go) call them by those
// names, so a verb whose conversion is missing does not compile.

func toCardReply(c board.Card) *storepb.CardReply   { return &storepb.CardReply{Card: toCard(c)} }
func fromCardReply(r *storepb.CardReply) board.Card { return fromCard(r.GetCard()) }
func toBoardReply(b board.Board) *storepb.BoardReply {
	return &storepb.BoardReply{Board: toBoardMessage(b)}
}
func fromBoardReply(r *storepb.BoardReply) board.Board { return fromBoardMessage(r.GetBoard()) }

// A claim's reply carries the token beside the card, as plugins built
// before the card alone answered send it; the card's own claim is the
// token.
func toCardTokenReply(c board.Card) *storepb.CardTokenReply {
	return &storepb.CardTokenReply{Card: toCard(c), Token: toClaimToken(c.Token())}
}
func fromCardTokenReply(r *storepb.CardTokenReply) board.Card { return fromCard(r.GetCard()) }

func toChangedReply(m board.MoveResult) *storepb.ChangedReply {
	return &storepb.ChangedReply{Changed: m.Changed}
}
func fromChangedReply(r *storepb.ChangedReply) board.MoveResult {
	return board.MoveResult{Changed: r.GetChanged()}
}

func toSetBoardRequest(p board.SetBoardParams) *storepb.SetBoardRequest {
	return &storepb.SetBoardRequest{Expect: toBoardMessage(p.Expect), Next: toBoardMessage(p.Next)}
}
func fromSetBoardRequest(r *storepb.SetBoardRequest) board.SetBoardParams {
	return board.SetBoardParams{Expect: fromBoardMessage(r.GetExpect()), Next: fromBoardMessage(r.GetNext())}
}
func toSetBoardReply(s board.SetBoardResult) *storepb.SetBoardReply {
	return &storepb.SetBoardReply{Board: toBoardMessage(s.Board), Changed: s.Changed}
}
func fromSetBoardReply(r *storepb.SetBoardReply) board.SetBoardResult {
	return board.SetBoardResult{Board: fromBoardMessage(r.GetBoard()), Changed: r.GetChanged()}
}

func toSetLabelsFromRequest(p board.SetLabelsFromParams) *storepb.SetLabelsFromRequest {
	return &storepb.SetLabelsFromRequest{Card: p.Card, Expect: toStrings(p.Expect), Labels: toStrings(p.Labels), Reason: string(p.Reason), Actor: p.Actor}
}
func fromSetLabelsFromRequest(r *storepb.SetLabelsFromRequest) board.SetLabelsFromParams {
	return board.SetLabelsFromParams{Card: r.GetCard(), Expect: fromStrings(r.GetExpect()), Labels: fromStrings(r.GetLabels()), Reason: board.Reason(r.GetReason()), Actor: r.GetActor()}
}
func toCardChangedReply(s board.SetLabelsFromResult) *storepb.CardChangedReply {
	return &storepb.CardChangedReply{Card: toCard(s.Card), Changed: s.Changed}
}
func fromCardChangedReply(r *storepb.CardChangedReply) board.SetLabelsFromResult {
	return board.SetLabelsFromResult{Card: fromCard(r.GetCard()), Changed: r.GetChanged()}
}

func toGetCardRequest(p board.GetCardParams) *storepb.GetCardRequest {
	return &storepb.GetCardRequest{Id: p.ID}
}
func fromGetCardRequest(r *storepb.GetCardRequest) board.GetCardParams {
	return board.GetCardParams{ID: r.GetId()}
}
func toDependentsRequest(p board.DependentsParams) *storepb.DependentsRequest {
	return &storepb.DependentsRequest{Id: p.ID}
}
func fromDependentsRequest(r *storepb.DependentsRequest) board.DependentsParams {
	return board.DependentsParams{ID: r.GetId()}
}
func toGetRunRequest(p board.GetRunParams) *storepb.GetRunRequest {
	return &storepb.GetRunRequest{Id: p.ID}
}
func fromGetRunRequest(r *storepb.GetRunRequest) board.GetRunParams {
	return board.GetRunParams{ID: r.GetId()}
}

func toListCardsRequest(p board.ListCardsParams) *storepb.ListCardsRequest {
	return &storepb.ListCardsRequest{State: p.State, Limit: int64(p.Limit), ClaimedOnly: p.ClaimedOnly, RecoveryOnly: p.RecoveryOnly, ClaimHosts: p.ClaimHosts}
}
func fromListCardsRequest(r *storepb.ListCardsRequest) board.ListCardsParams {
	return board.ListCardsParams{State: r.GetState(), Limit: int(r.GetLimit()), ClaimedOnly: r.GetClaimedOnly(), RecoveryOnly: r.GetRecoveryOnly(), ClaimHosts: r.GetClaimHosts()}
}

func toCreateCardRequest(p board.CreateCardParams) *storepb.CreateCardRequest {
	return &storepb.CreateCardRequest{
		Id: p.ID, Title: p.Title, State: p.State,
		Labels: toStrings(p.Labels), DependsOn: toStrings(p.DependsOn), Actor: p.Actor,
		Retry: toRetryPolicy(p.Retry),
	}
}
func fromCreateCardRequest(r *storepb.CreateCardRequest) board.CreateCardParams {
	return board.CreateCardParams{
		ID: r.GetId(), Title: r.GetTitle(), State: r.GetState(),
		Labels: fromStrings(r.GetLabels()), DependsOn: fromStrings(r.GetDependsOn()), Actor: r.GetActor(),
		Retry: fromRetryPolicy(r.GetRetry()),
	}
}

func toMoveRequest(m board.MoveParams) *storepb.MoveRequest {
	return &storepb.MoveRequest{Card: m.Card, To: m.To, From: m.From, Reason: string(m.Reason), Actor: m.Actor}
}
func fromMoveRequest(r *storepb.MoveRequest) board.MoveParams {
	return board.MoveParams{Card: r.GetCard(), To: r.GetTo(), From: r.GetFrom(), Reason: board.Reason(r.GetReason()), Actor: r.GetActor()}
}

func toAdjustLabelsRequest(p board.AdjustLabelsParams) *storepb.AdjustLabelsRequest {
	return &storepb.AdjustLabelsRequest{Card: p.Card, Add: toStrings(p.Add), Remove: toStrings(p.Remove), Actor: p.Actor}
}
func fromAdjustLabelsRequest(r *storepb.AdjustLabelsRequest) board.AdjustLabelsParams {
	return board.AdjustLabelsParams{Card: r.GetCard(), Add: fromStrings(r.GetAdd()), Remove: fromStrings(r.GetRemove()), Actor: r.GetActor()}
}
func toSetLabelsRequest(p board.SetLabelsParams) *storepb.SetLabelsRequest {
	return &storepb.SetLabelsRequest{Card: p.Card, Labels: toStrings(p.Labels), Actor: p.Actor}
}
func fromSetLabelsRequest(r *storepb.SetLabelsRequest) board.SetLabelsParams {
	return board.SetLabelsParams{Card: r.GetCard(), Labels: fromStrings(r.GetLabels()), Actor: r.GetActor()}
}
func toReleaseRequest(p board.ReleaseParams) *storepb.ReleaseRequest {
	return &storepb.ReleaseRequest{Card: p.Card, Marker: p.Marker, Actor: p.Actor}
}
func fromReleaseRequest(r *storepb.ReleaseRequest) board.ReleaseParams {
	return board.ReleaseParams{Card: r.GetCard(), Marker: r.GetMarker(), Actor: r.GetActor()}
}

func toClaimRequest(p board.ClaimParams) *storepb.ClaimRequest {
	return &storepb.ClaimRequest{Card: p.Card, Marker: p.Marker, LeaseNanos: int64(p.Lease)}
}
func fromClaimRequest(r *storepb.ClaimRequest) board.ClaimParams {
	return board.ClaimParams{Card: r.GetCard(), Marker: r.GetMarker(), Lease: time.Duration(r.GetLeaseNanos())}
}
func toClaimNextRequest(p board.ClaimNextParams) *storepb.ClaimNextRequest {
	return &storepb.ClaimNextRequest{Marker: p.Marker, LeaseNanos: int64(p.Lease), Labels: p.Labels}
}
func fromClaimNextRequest(r *storepb.ClaimNextRequest) board.ClaimNextParams {
	return board.ClaimNextParams{Marker: r.GetMarker(), Lease: time.Duration(r.GetLeaseNanos()), Labels: r.GetLabels()}
}

// A nil batch and an empty one both cross the boundary as themselves: a
// store answers them differently (DESIGN.md#heartbeat-batch).
func toRenewClaimsRequest(p board.RenewClaimsParams) *storepb.RenewClaimsRequest {
	out := &storepb.RenewClaimsRequest{LeaseNanos: int64(p.Lease), Nil: p.Holds == nil, Holds: make([]*storepb.Hold, 0, len(p.Holds))}
	for _, h := range p.Holds {
		out.Holds = append(out.Holds, &storepb.Hold{Card: h.Card, Token: toClaimToken(h.Token)})
	}
	return out
}
func fromRenewClaimsRequest(r *storepb.RenewClaimsRequest) board.RenewClaimsParams {
	var holds []board.Hold
	if !r.GetNil() {
		holds = make([]board.Hold, 0, len(r.GetHolds()))
	}
	for _, h := range r.GetHolds() {
		holds = append(holds, board.Hold{Card: h.GetCard(), Token: fromClaimToken(h.GetToken())})
	}
	return board.RenewClaimsParams{Holds: holds, Lease: time.Duration(r.GetLeaseNanos())}
}
func toRenewClaimsReply(res []board.RenewResult) *storepb.RenewClaimsReply {
	out := &storepb.RenewClaimsReply{Nil: res == nil, Results: make([]*storepb.RenewResult, 0, len(res))}
	for _, rr := range res {
		out.Results = append(out.Results, &storepb.RenewResult{Card: rr.Card, LeaseUntil: toTime(rr.LeaseUntil), Err: storeErrorToPB(rr.Err)})
	}
	return out
}
func fromRenewClaimsReply(r *storepb.RenewClaimsReply) []board.RenewResult {
	if r.GetNil() {
		return nil
	}
	out := make([]board.RenewResult, 0, len(r.GetResults()))
	for _, rr := range r.GetResults() {
		out = append(out, board.RenewResult{Card: rr.GetCard(), LeaseUntil: fromTime(rr.GetLeaseUntil()), Err: errorFromPB(rr.GetErr())})
	}
	return out
}

func toSetStateOwnedRequest(m board.SetStateOwnedParams) *storepb.SetStateOwnedRequest {
	return &storepb.SetStateOwnedRequest{Card: m.Card, Token: toClaimToken(m.Token), To: m.To, From: m.From, Reason: string(m.Reason), Retry: m.Retry}
}
func fromSetStateOwnedRequest(r *storepb.SetStateOwnedRequest) board.SetStateOwnedParams {
	return board.SetStateOwnedParams{Card: r.GetCard(), Token: fromClaimToken(r.GetToken()), To: r.GetTo(), From: r.GetFrom(), Reason: board.Reason(r.GetReason()), Retry: r.GetRetry()}
}
func toSetLastRunOwnedRequest(p board.SetLastRunOwnedParams) *storepb.SetLastRunOwnedRequest {
	return &storepb.SetLastRunOwnedRequest{Card: p.Card, Token: toClaimToken(p.Token), RunId: p.RunID}
}
func fromSetLastRunOwnedRequest(r *storepb.SetLastRunOwnedRequest) board.SetLastRunOwnedParams {
	return board.SetLastRunOwnedParams{Card: r.GetCard(), Token: fromClaimToken(r.GetToken()), RunID: r.GetRunId()}
}
func toSetAwaitingInputOwnedRequest(p board.SetAwaitingInputOwnedParams) *storepb.SetAwaitingInputOwnedRequest {
	return &storepb.SetAwaitingInputOwnedRequest{Card: p.Card, Token: toClaimToken(p.Token), Awaiting: p.Awaiting}
}
func fromSetAwaitingInputOwnedRequest(r *storepb.SetAwaitingInputOwnedRequest) board.SetAwaitingInputOwnedParams {
	return board.SetAwaitingInputOwnedParams{Card: r.GetCard(), Token: fromClaimToken(r.GetToken()), Awaiting: r.GetAwaiting()}
}
func toSetGaveUpOwnedRequest(p board.SetGaveUpOwnedParams) *storepb.SetGaveUpOwnedRequest {
	return &storepb.SetGaveUpOwnedRequest{Card: p.Card, Token: toClaimToken(p.Token), GaveUp: toGaveUp(p.GaveUp)}
}
func fromSetGaveUpOwnedRequest(r *storepb.SetGaveUpOwnedRequest) board.SetGaveUpOwnedParams {
	return board.SetGaveUpOwnedParams{Card: r.GetCard(), Token: fromClaimToken(r.GetToken()), GaveUp: fromGaveUp(r.GetGaveUp())}
}
func toOwnedCardRequest(p board.OwnedParams) *storepb.OwnedCardRequest {
	return &storepb.OwnedCardRequest{Card: p.Card, Token: toClaimToken(p.Token)}
}
func fromOwnedCardRequest(r *storepb.OwnedCardRequest) board.OwnedParams {
	return board.OwnedParams{Card: r.GetCard(), Token: fromClaimToken(r.GetToken())}
}

func toReleaseExpiredRequest(p board.ReleaseExpiredParams) *storepb.ReleaseExpiredRequest {
	return &storepb.ReleaseExpiredRequest{Card: p.Card, Prev: toClaimToken(p.Prev), Cutoff: toTime(p.Cutoff), Actor: p.Actor, State: p.State}
}
func fromReleaseExpiredRequest(r *storepb.ReleaseExpiredRequest) board.ReleaseExpiredParams {
	return board.ReleaseExpiredParams{Card: r.GetCard(), Prev: fromClaimToken(r.GetPrev()), Cutoff: fromTime(r.GetCutoff()), Actor: r.GetActor(), State: r.GetState()}
}

func toReclaimExpiredRequest(p board.ReclaimExpiredParams) *storepb.ReclaimExpiredRequest {
	return &storepb.ReclaimExpiredRequest{Card: p.Card, Prev: toClaimToken(p.Prev), RecoveryMarker: p.RecoveryMarker, Cutoff: toTime(p.Cutoff), LeaseNanos: int64(p.Lease)}
}
func fromReclaimExpiredRequest(r *storepb.ReclaimExpiredRequest) board.ReclaimExpiredParams {
	return board.ReclaimExpiredParams{Card: r.GetCard(), Prev: fromClaimToken(r.GetPrev()), RecoveryMarker: r.GetRecoveryMarker(), Cutoff: fromTime(r.GetCutoff()), Lease: time.Duration(r.GetLeaseNanos())}
}

func toListExpiredRequest(p board.ListExpiredClaimCandidatesParams) *storepb.ListExpiredRequest {
	out := &storepb.ListExpiredRequest{Cutoff: toTime(p.Cutoff), Limit: int64(p.Limit), After: p.After}
	if p.Share != nil {
		out.ShareReaper, out.ShareIntervalNs = p.Share.Reaper, int64(p.Share.Interval)
	}
	return out
}
func fromListExpiredRequest(r *storepb.ListExpiredRequest) board.ListExpiredClaimCandidatesParams {
	out := board.ListExpiredClaimCandidatesParams{Cutoff: fromTime(r.GetCutoff()), Limit: int(r.GetLimit()), After: r.GetAfter()}
	if r.GetShareReaper() != "" || r.GetShareIntervalNs() != 0 {
		out.Share = &board.ReaperShare{Reaper: r.GetShareReaper(), Interval: time.Duration(r.GetShareIntervalNs())}
	}
	return out
}
func toExpiredPageReply(page board.ListExpiredClaimCandidatesResult) *storepb.ExpiredPageReply {
	out := &storepb.ExpiredPageReply{Next: page.Next, Reapers: int64(page.Reapers), ShareIndex: int64(page.ShareIndex), ShareError: page.ShareError, Cards: make([]*storepb.Card, 0, len(page.Cards))}
	for _, c := range page.Cards {
		out.Cards = append(out.Cards, toCard(c))
	}
	return out
}
func fromExpiredPageReply(r *storepb.ExpiredPageReply) board.ListExpiredClaimCandidatesResult {
	page := board.ListExpiredClaimCandidatesResult{Next: r.GetNext(), Reapers: int(r.GetReapers()), ShareIndex: int(r.GetShareIndex()), ShareError: r.GetShareError()}
	for _, c := range r.GetCards() {
		page.Cards = append(page.Cards, fromCard(c))
	}
	return page
}

func toListCutoffRequest(p board.ListUnleasedRunningClaimsParams) *storepb.ListCutoffRequest {
	return &storepb.ListCutoffRequest{Cutoff: toTime(p.Cutoff), Limit: int64(p.Limit)}
}
func fromListCutoffRequest(r *storepb.ListCutoffRequest) board.ListUnleasedRunningClaimsParams {
	return board.ListUnleasedRunningClaimsParams{Cutoff: fromTime(r.GetCutoff()), Limit: int(r.GetLimit())}
}

func toEventsRequest(p board.EventsParams) *storepb.EventsRequest {
	return &storepb.EventsRequest{After: p.After, Limit: int64(p.Limit)}
}
func fromEventsRequest(r *storepb.EventsRequest) board.EventsParams {
	return board.EventsParams{After: r.GetAfter(), Limit: int(r.GetLimit())}
}
func toEventsReply(evs []board.Event) *storepb.EventsReply {
	out := &storepb.EventsReply{Nil: evs == nil, Events: make([]*storepb.Event, 0, len(evs))}
	for _, e := range evs {
		out.Events = append(out.Events, toEvent(e))
	}
	return out
}
func fromEventsReply(r *storepb.EventsReply) []board.Event {
	if r.GetNil() {
		return nil
	}
	out := make([]board.Event, 0, len(r.GetEvents()))
	for _, e := range r.GetEvents() {
		out = append(out, fromEvent(e))
	}
	return out
}

func toCardCountsReply(c board.CardCounts) *storepb.CardCountsReply {
	out := &storepb.CardCountsReply{States: make(map[string]int64, len(c.States)), Claimed: int64(c.Claimed)}
	for s, n := range c.States {
		out.States[s] = int64(n)
	}
	return out
}
func fromCardCountsReply(r *storepb.CardCountsReply) board.CardCounts {
	out := board.CardCounts{States: make(map[string]int, len(r.GetStates())), Claimed: int(r.GetClaimed())}
	for s, n := range r.GetStates() {
		out.States[s] = int(n)
	}
	return out
}

func toDeleteCardRequest(p board.DeleteCardParams) *storepb.DeleteCardRequest {
	return &storepb.DeleteCardRequest{Id: p.ID, Actor: p.Actor, DryRun: p.DryRun}
}
func fromDeleteCardRequest(r *storepb.DeleteCardRequest) board.DeleteCardParams {
	return board.DeleteCardParams{ID: r.GetId(), Actor: r.GetActor(), DryRun: r.GetDryRun()}
}
func toDeleteCardReply(res board.DeleteCardResult) *storepb.DeleteCardReply {
	return &storepb.DeleteCardReply{Card: toCard(res.Card), Runs: int64(res.Runs), DryRun: res.DryRun}
}
func fromDeleteCardReply(r *storepb.DeleteCardReply) board.DeleteCardResult {
	return board.DeleteCardResult{Card: fromCard(r.GetCard()), Runs: int(r.GetRuns()), DryRun: r.GetDryRun()}
}
