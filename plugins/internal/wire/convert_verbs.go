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
