package wire

import (
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// The conversions of each verb's request and reply, named after the
// message: To<Message> builds it from the verb's Go value, From<Message>
// reads it back. The generated verbs and handlers (plugins/verbs_gen.go,
// plugins/serve/verbs_gen.go) call them by those names, so a verb whose
// conversion is missing does not compile.

func ToCardReply(c board.Card) *storepb.CardReply   { return &storepb.CardReply{Card: ToCard(c)} }
func FromCardReply(r *storepb.CardReply) board.Card { return FromCard(r.GetCard()) }
func ToBoardReply(b board.Board) *storepb.BoardReply {
	return &storepb.BoardReply{Board: ToBoardMessage(b)}
}
func FromBoardReply(r *storepb.BoardReply) board.Board { return FromBoardMessage(r.GetBoard()) }

// A claim's reply carries the token beside the card, as plugins built
// before the card alone answered send it; the card's own claim is the
// token.
func ToCardTokenReply(c board.Card) *storepb.CardTokenReply {
	return &storepb.CardTokenReply{Card: ToCard(c), Token: ToClaimToken(c.Token())}
}

// FromCardTokenReply reads a claim's answer. The token is the grant, so
// it wins over the card's own claim fields: a plugin whose store answers
// with the card as it read it still hands the agent the claim it holds.
func FromCardTokenReply(r *storepb.CardTokenReply) board.Card {
	c := FromCard(r.GetCard())
	if t := r.GetToken(); t != nil {
		c.Claim, c.ClaimEpoch = t.GetMarker(), t.GetEpoch()
	}
	return c
}

func ToChangedReply(m board.MoveResult) *storepb.ChangedReply {
	return &storepb.ChangedReply{Changed: m.Changed}
}
func FromChangedReply(r *storepb.ChangedReply) board.MoveResult {
	return board.MoveResult{Changed: r.GetChanged()}
}

func ToSetBoardRequest(p board.SetBoardParams) *storepb.SetBoardRequest {
	return &storepb.SetBoardRequest{Expect: ToBoardMessage(p.Expect), Next: ToBoardMessage(p.Next)}
}
func FromSetBoardRequest(r *storepb.SetBoardRequest) board.SetBoardParams {
	return board.SetBoardParams{Expect: FromBoardMessage(r.GetExpect()), Next: FromBoardMessage(r.GetNext())}
}
func ToSetBoardReply(s board.SetBoardResult) *storepb.SetBoardReply {
	return &storepb.SetBoardReply{Board: ToBoardMessage(s.Board), Changed: s.Changed}
}
func FromSetBoardReply(r *storepb.SetBoardReply) board.SetBoardResult {
	return board.SetBoardResult{Board: FromBoardMessage(r.GetBoard()), Changed: r.GetChanged()}
}

func ToSetLabelsFromRequest(p board.SetLabelsFromParams) *storepb.SetLabelsFromRequest {
	return &storepb.SetLabelsFromRequest{Card: p.Card, Expect: ToStrings(p.Expect), Labels: ToStrings(p.Labels), Reason: string(p.Reason), Actor: p.Actor}
}
func FromSetLabelsFromRequest(r *storepb.SetLabelsFromRequest) board.SetLabelsFromParams {
	return board.SetLabelsFromParams{Card: r.GetCard(), Expect: FromStrings(r.GetExpect()), Labels: FromStrings(r.GetLabels()), Reason: board.Reason(r.GetReason()), Actor: r.GetActor()}
}
func ToCardChangedReply(s board.SetLabelsFromResult) *storepb.CardChangedReply {
	return &storepb.CardChangedReply{Card: ToCard(s.Card), Changed: s.Changed}
}
func FromCardChangedReply(r *storepb.CardChangedReply) board.SetLabelsFromResult {
	return board.SetLabelsFromResult{Card: FromCard(r.GetCard()), Changed: r.GetChanged()}
}

func ToGetCardRequest(p board.GetCardParams) *storepb.GetCardRequest {
	return &storepb.GetCardRequest{Id: p.ID}
}
func FromGetCardRequest(r *storepb.GetCardRequest) board.GetCardParams {
	return board.GetCardParams{ID: r.GetId()}
}
func ToDependentsRequest(p board.DependentsParams) *storepb.DependentsRequest {
	return &storepb.DependentsRequest{Id: p.ID}
}
func FromDependentsRequest(r *storepb.DependentsRequest) board.DependentsParams {
	return board.DependentsParams{ID: r.GetId()}
}
func ToGetRunRequest(p board.GetRunParams) *storepb.GetRunRequest {
	return &storepb.GetRunRequest{Id: p.ID}
}
func FromGetRunRequest(r *storepb.GetRunRequest) board.GetRunParams {
	return board.GetRunParams{ID: r.GetId()}
}

func ToListCardsRequest(p board.ListCardsParams) *storepb.ListCardsRequest {
	return &storepb.ListCardsRequest{State: p.State, Limit: int64(p.Limit), ClaimedOnly: p.ClaimedOnly, RecoveryOnly: p.RecoveryOnly, ClaimHosts: p.ClaimHosts}
}
func FromListCardsRequest(r *storepb.ListCardsRequest) board.ListCardsParams {
	return board.ListCardsParams{State: r.GetState(), Limit: int(r.GetLimit()), ClaimedOnly: r.GetClaimedOnly(), RecoveryOnly: r.GetRecoveryOnly(), ClaimHosts: r.GetClaimHosts()}
}

func ToCreateCardRequest(p board.CreateCardParams) *storepb.CreateCardRequest {
	return &storepb.CreateCardRequest{
		Id: p.ID, Title: p.Title, State: p.State,
		Labels: ToStrings(p.Labels), DependsOn: ToStrings(p.DependsOn), Actor: p.Actor,
		Retry: ToRetryPolicy(p.Retry),
	}
}
func FromCreateCardRequest(r *storepb.CreateCardRequest) board.CreateCardParams {
	return board.CreateCardParams{
		ID: r.GetId(), Title: r.GetTitle(), State: r.GetState(),
		Labels: FromStrings(r.GetLabels()), DependsOn: FromStrings(r.GetDependsOn()), Actor: r.GetActor(),
		Retry: FromRetryPolicy(r.GetRetry()),
	}
}

func ToMoveRequest(m board.MoveParams) *storepb.MoveRequest {
	return &storepb.MoveRequest{Card: m.Card, To: m.To, From: m.From, Reason: string(m.Reason), Actor: m.Actor}
}
func FromMoveRequest(r *storepb.MoveRequest) board.MoveParams {
	return board.MoveParams{Card: r.GetCard(), To: r.GetTo(), From: r.GetFrom(), Reason: board.Reason(r.GetReason()), Actor: r.GetActor()}
}

func ToAdjustLabelsRequest(p board.AdjustLabelsParams) *storepb.AdjustLabelsRequest {
	return &storepb.AdjustLabelsRequest{Card: p.Card, Add: ToStrings(p.Add), Remove: ToStrings(p.Remove), Actor: p.Actor}
}
func FromAdjustLabelsRequest(r *storepb.AdjustLabelsRequest) board.AdjustLabelsParams {
	return board.AdjustLabelsParams{Card: r.GetCard(), Add: FromStrings(r.GetAdd()), Remove: FromStrings(r.GetRemove()), Actor: r.GetActor()}
}
func ToSetLabelsRequest(p board.SetLabelsParams) *storepb.SetLabelsRequest {
	return &storepb.SetLabelsRequest{Card: p.Card, Labels: ToStrings(p.Labels), Actor: p.Actor}
}
func FromSetLabelsRequest(r *storepb.SetLabelsRequest) board.SetLabelsParams {
	return board.SetLabelsParams{Card: r.GetCard(), Labels: FromStrings(r.GetLabels()), Actor: r.GetActor()}
}
func ToReleaseRequest(p board.ReleaseParams) *storepb.ReleaseRequest {
	return &storepb.ReleaseRequest{Card: p.Card, Marker: p.Marker, Actor: p.Actor}
}
func FromReleaseRequest(r *storepb.ReleaseRequest) board.ReleaseParams {
	return board.ReleaseParams{Card: r.GetCard(), Marker: r.GetMarker(), Actor: r.GetActor()}
}

func ToClaimRequest(p board.ClaimParams) *storepb.ClaimRequest {
	return &storepb.ClaimRequest{Card: p.Card, Marker: p.Marker, LeaseNanos: int64(p.Lease)}
}
func FromClaimRequest(r *storepb.ClaimRequest) board.ClaimParams {
	return board.ClaimParams{Card: r.GetCard(), Marker: r.GetMarker(), Lease: time.Duration(r.GetLeaseNanos())}
}
func ToClaimNextRequest(p board.ClaimNextParams) *storepb.ClaimNextRequest {
	return &storepb.ClaimNextRequest{Marker: p.Marker, LeaseNanos: int64(p.Lease), Labels: p.Labels}
}
func FromClaimNextRequest(r *storepb.ClaimNextRequest) board.ClaimNextParams {
	return board.ClaimNextParams{Marker: r.GetMarker(), Lease: time.Duration(r.GetLeaseNanos()), Labels: r.GetLabels()}
}

// A nil batch and an empty one both cross the boundary as themselves: a
// store answers them differently (DESIGN.md#heartbeat-batch).
func ToRenewClaimsRequest(p board.RenewClaimsParams) *storepb.RenewClaimsRequest {
	out := &storepb.RenewClaimsRequest{LeaseNanos: int64(p.Lease), Nil: p.Holds == nil, Holds: make([]*storepb.Hold, 0, len(p.Holds))}
	for _, h := range p.Holds {
		out.Holds = append(out.Holds, &storepb.Hold{Card: h.Card, Token: ToClaimToken(h.Token)})
	}
	return out
}
func FromRenewClaimsRequest(r *storepb.RenewClaimsRequest) board.RenewClaimsParams {
	var holds []board.Hold
	if !r.GetNil() {
		holds = make([]board.Hold, 0, len(r.GetHolds()))
	}
	for _, h := range r.GetHolds() {
		holds = append(holds, board.Hold{Card: h.GetCard(), Token: FromClaimToken(h.GetToken())})
	}
	return board.RenewClaimsParams{Holds: holds, Lease: time.Duration(r.GetLeaseNanos())}
}
func ToRenewClaimsReply(res []board.RenewResult) *storepb.RenewClaimsReply {
	out := &storepb.RenewClaimsReply{Nil: res == nil, Results: make([]*storepb.RenewResult, 0, len(res))}
	for _, rr := range res {
		out.Results = append(out.Results, &storepb.RenewResult{Card: rr.Card, LeaseUntil: ToTime(rr.LeaseUntil), Err: storeErrorToPB(rr.Err)})
	}
	return out
}
func FromRenewClaimsReply(r *storepb.RenewClaimsReply) []board.RenewResult {
	if r.GetNil() {
		return nil
	}
	out := make([]board.RenewResult, 0, len(r.GetResults()))
	for _, rr := range r.GetResults() {
		out = append(out, board.RenewResult{Card: rr.GetCard(), LeaseUntil: FromTime(rr.GetLeaseUntil()), Err: ErrorFromPB(rr.GetErr())})
	}
	return out
}

func ToSetStateOwnedRequest(m board.SetStateOwnedParams) *storepb.SetStateOwnedRequest {
	return &storepb.SetStateOwnedRequest{Card: m.Card, Token: ToClaimToken(m.Token), To: m.To, From: m.From, Reason: string(m.Reason), Retry: m.Retry}
}
func FromSetStateOwnedRequest(r *storepb.SetStateOwnedRequest) board.SetStateOwnedParams {
	return board.SetStateOwnedParams{Card: r.GetCard(), Token: FromClaimToken(r.GetToken()), To: r.GetTo(), From: r.GetFrom(), Reason: board.Reason(r.GetReason()), Retry: r.GetRetry()}
}
func ToSetLastRunOwnedRequest(p board.SetLastRunOwnedParams) *storepb.SetLastRunOwnedRequest {
	return &storepb.SetLastRunOwnedRequest{Card: p.Card, Token: ToClaimToken(p.Token), RunId: p.RunID}
}
func FromSetLastRunOwnedRequest(r *storepb.SetLastRunOwnedRequest) board.SetLastRunOwnedParams {
	return board.SetLastRunOwnedParams{Card: r.GetCard(), Token: FromClaimToken(r.GetToken()), RunID: r.GetRunId()}
}
func ToSetAwaitingInputOwnedRequest(p board.SetAwaitingInputOwnedParams) *storepb.SetAwaitingInputOwnedRequest {
	return &storepb.SetAwaitingInputOwnedRequest{Card: p.Card, Token: ToClaimToken(p.Token), Awaiting: p.Awaiting}
}
func FromSetAwaitingInputOwnedRequest(r *storepb.SetAwaitingInputOwnedRequest) board.SetAwaitingInputOwnedParams {
	return board.SetAwaitingInputOwnedParams{Card: r.GetCard(), Token: FromClaimToken(r.GetToken()), Awaiting: r.GetAwaiting()}
}
func ToSetGaveUpOwnedRequest(p board.SetGaveUpOwnedParams) *storepb.SetGaveUpOwnedRequest {
	return &storepb.SetGaveUpOwnedRequest{Card: p.Card, Token: ToClaimToken(p.Token), GaveUp: ToGaveUp(p.GaveUp)}
}
func FromSetGaveUpOwnedRequest(r *storepb.SetGaveUpOwnedRequest) board.SetGaveUpOwnedParams {
	return board.SetGaveUpOwnedParams{Card: r.GetCard(), Token: FromClaimToken(r.GetToken()), GaveUp: FromGaveUp(r.GetGaveUp())}
}
func ToOwnedCardRequest(p board.OwnedParams) *storepb.OwnedCardRequest {
	return &storepb.OwnedCardRequest{Card: p.Card, Token: ToClaimToken(p.Token)}
}
func FromOwnedCardRequest(r *storepb.OwnedCardRequest) board.OwnedParams {
	return board.OwnedParams{Card: r.GetCard(), Token: FromClaimToken(r.GetToken())}
}

func ToReleaseExpiredRequest(p board.ReleaseExpiredParams) *storepb.ReleaseExpiredRequest {
	return &storepb.ReleaseExpiredRequest{Card: p.Card, Prev: ToClaimToken(p.Prev), Cutoff: ToTime(p.Cutoff), Actor: p.Actor, State: p.State}
}
func FromReleaseExpiredRequest(r *storepb.ReleaseExpiredRequest) board.ReleaseExpiredParams {
	return board.ReleaseExpiredParams{Card: r.GetCard(), Prev: FromClaimToken(r.GetPrev()), Cutoff: FromTime(r.GetCutoff()), Actor: r.GetActor(), State: r.GetState()}
}

func ToReclaimExpiredRequest(p board.ReclaimExpiredParams) *storepb.ReclaimExpiredRequest {
	return &storepb.ReclaimExpiredRequest{Card: p.Card, Prev: ToClaimToken(p.Prev), RecoveryMarker: p.RecoveryMarker, Cutoff: ToTime(p.Cutoff), LeaseNanos: int64(p.Lease)}
}
func FromReclaimExpiredRequest(r *storepb.ReclaimExpiredRequest) board.ReclaimExpiredParams {
	return board.ReclaimExpiredParams{Card: r.GetCard(), Prev: FromClaimToken(r.GetPrev()), RecoveryMarker: r.GetRecoveryMarker(), Cutoff: FromTime(r.GetCutoff()), Lease: time.Duration(r.GetLeaseNanos())}
}

func ToListExpiredRequest(p board.ListExpiredClaimCandidatesParams) *storepb.ListExpiredRequest {
	out := &storepb.ListExpiredRequest{Cutoff: ToTime(p.Cutoff), Limit: int64(p.Limit), After: p.After}
	if p.Share != nil {
		out.ShareReaper, out.ShareIntervalNs = p.Share.Reaper, int64(p.Share.Interval)
	}
	return out
}
func FromListExpiredRequest(r *storepb.ListExpiredRequest) board.ListExpiredClaimCandidatesParams {
	out := board.ListExpiredClaimCandidatesParams{Cutoff: FromTime(r.GetCutoff()), Limit: int(r.GetLimit()), After: r.GetAfter()}
	if r.GetShareReaper() != "" || r.GetShareIntervalNs() != 0 {
		out.Share = &board.ReaperShare{Reaper: r.GetShareReaper(), Interval: time.Duration(r.GetShareIntervalNs())}
	}
	return out
}
func ToExpiredPageReply(page board.ListExpiredClaimCandidatesResult) *storepb.ExpiredPageReply {
	out := &storepb.ExpiredPageReply{Next: page.Next, Reapers: int64(page.Reapers), ShareIndex: int64(page.ShareIndex), ShareError: page.ShareError, Cards: make([]*storepb.Card, 0, len(page.Cards))}
	for _, c := range page.Cards {
		out.Cards = append(out.Cards, ToCard(c))
	}
	return out
}
func FromExpiredPageReply(r *storepb.ExpiredPageReply) board.ListExpiredClaimCandidatesResult {
	page := board.ListExpiredClaimCandidatesResult{Next: r.GetNext(), Reapers: int(r.GetReapers()), ShareIndex: int(r.GetShareIndex()), ShareError: r.GetShareError()}
	for _, c := range r.GetCards() {
		page.Cards = append(page.Cards, FromCard(c))
	}
	return page
}

func ToListCutoffRequest(p board.ListUnleasedRunningClaimsParams) *storepb.ListCutoffRequest {
	return &storepb.ListCutoffRequest{Cutoff: ToTime(p.Cutoff), Limit: int64(p.Limit)}
}
func FromListCutoffRequest(r *storepb.ListCutoffRequest) board.ListUnleasedRunningClaimsParams {
	return board.ListUnleasedRunningClaimsParams{Cutoff: FromTime(r.GetCutoff()), Limit: int(r.GetLimit())}
}

func ToEventsRequest(p board.EventsParams) *storepb.EventsRequest {
	return &storepb.EventsRequest{After: p.After, Limit: int64(p.Limit)}
}
func FromEventsRequest(r *storepb.EventsRequest) board.EventsParams {
	return board.EventsParams{After: r.GetAfter(), Limit: int(r.GetLimit())}
}
func ToEventsReply(evs []board.Event) *storepb.EventsReply {
	out := &storepb.EventsReply{Nil: evs == nil, Events: make([]*storepb.Event, 0, len(evs))}
	for _, e := range evs {
		out.Events = append(out.Events, ToEvent(e))
	}
	return out
}
func FromEventsReply(r *storepb.EventsReply) []board.Event {
	if r.GetNil() {
		return nil
	}
	out := make([]board.Event, 0, len(r.GetEvents()))
	for _, e := range r.GetEvents() {
		out = append(out, FromEvent(e))
	}
	return out
}

func ToDeleteCardRequest(p board.DeleteCardParams) *storepb.DeleteCardRequest {
	return &storepb.DeleteCardRequest{Id: p.ID, Actor: p.Actor, DryRun: p.DryRun}
}
func FromDeleteCardRequest(r *storepb.DeleteCardRequest) board.DeleteCardParams {
	return board.DeleteCardParams{ID: r.GetId(), Actor: r.GetActor(), DryRun: r.GetDryRun()}
}
func ToDeleteCardReply(res board.DeleteCardResult) *storepb.DeleteCardReply {
	return &storepb.DeleteCardReply{Card: ToCard(res.Card), Runs: int64(res.Runs), DryRun: res.DryRun}
}
func FromDeleteCardReply(r *storepb.DeleteCardReply) board.DeleteCardResult {
	return board.DeleteCardResult{Card: FromCard(r.GetCard()), Runs: int(r.GetRuns()), DryRun: r.GetDryRun()}
}

// ToCardCountsReply and FromCardCountsReply carry CountCards' answer.
func ToCardCountsReply(c board.CardCounts) *storepb.CardCountsReply {
	out := &storepb.CardCountsReply{States: make(map[string]int64, len(c.States)), Claimed: int64(c.Claimed)}
	for s, n := range c.States {
		out.States[s] = int64(n)
	}
	return out
}

func FromCardCountsReply(r *storepb.CardCountsReply) board.CardCounts {
	out := board.CardCounts{States: make(map[string]int, len(r.GetStates())), Claimed: int(r.GetClaimed())}
	for s, n := range r.GetStates() {
		out.States[s] = int(n)
	}
	return out
}
