package plugins

import (
	"context"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// server serves a board.Store over gRPC. Each handler passes the RPC's
// context to the store, so the agent's deadline and cancellation reach the
// backend, and returns store errors through toStatus so their identity
// survives the trip.
type server struct {
	storepb.UnimplementedStoreServer
	store board.Store
}

func (s *server) Board(ctx context.Context, _ *storepb.BoardRequest) (*storepb.BoardReply, error) {
	b, err := s.store.LoadBoard(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	t := s.store.Traits()
	return &storepb.BoardReply{Board: boardToPB(b), Traits: &storepb.TraitsMessage{
		Shared: t.Shared, ServerClock: t.ServerClock, Outbox: t.Outbox,
	}}, nil
}

func (s *server) CreateCard(ctx context.Context, r *storepb.CreateCardRequest) (*storepb.CardReply, error) {
	c, err := s.store.CreateCard(ctx, board.NewCard{
		ID: r.GetId(), Title: r.GetTitle(), State: r.GetState(),
		Labels: stringsFromPB(r.GetLabels()), DependsOn: stringsFromPB(r.GetDependsOn()), Actor: r.GetActor(),
		Retry: retryFromPB(r.GetRetry()),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &storepb.CardReply{Card: cardToPB(c)}, nil
}

func (s *server) GetCard(ctx context.Context, r *storepb.GetCardRequest) (*storepb.CardReply, error) {
	c, err := s.store.GetCard(ctx, r.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &storepb.CardReply{Card: cardToPB(c)}, nil
}

func (s *server) ListCards(ctx context.Context, r *storepb.ListCardsRequest) (*storepb.CardsReply, error) {
	cs, err := s.store.ListCards(ctx, board.CardFilter{State: r.GetState(), Limit: int(r.GetLimit()), ClaimedOnly: r.GetClaimedOnly(), RecoveryOnly: r.GetRecoveryOnly(), ClaimHosts: r.GetClaimHosts()})
	if err != nil {
		return nil, toStatus(err)
	}
	return cardsToPB(cs), nil
}

func (s *server) Dependents(ctx context.Context, r *storepb.DependentsRequest) (*storepb.CardsReply, error) {
	cs, err := s.store.Dependents(ctx, r.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return cardsToPB(cs), nil
}

func (s *server) Claim(ctx context.Context, r *storepb.ClaimRequest) (*storepb.CardTokenReply, error) {
	c, tok, err := s.store.Claim(ctx, board.ClaimRequest{Card: r.GetCard(), Marker: r.GetMarker(), Lease: time.Duration(r.GetLeaseNanos())})
	if err != nil {
		return nil, toStatus(err)
	}
	return &storepb.CardTokenReply{Card: cardToPB(c), Token: tokenToPB(tok)}, nil
}

func (s *server) Start(ctx context.Context, r *storepb.StartRequest) (*storepb.StartedReply, error) {
	st, err := s.store.Start(ctx, startFromPB(r))
	if err != nil {
		return nil, toStatus(err)
	}
	return startedToPB(st), nil
}

func (s *server) Finish(ctx context.Context, r *storepb.FinishRequest) (*storepb.FinishedReply, error) {
	f, err := s.store.Finish(ctx, finishFromPB(r))
	if err != nil {
		return nil, toStatus(err)
	}
	return finishedToPB(f), nil
}

func (s *server) ClaimNext(ctx context.Context, r *storepb.ClaimNextRequest) (*storepb.CardTokenReply, error) {
	c, tok, err := s.store.ClaimNext(ctx, board.ClaimNextRequest{Marker: r.GetMarker(), Lease: time.Duration(r.GetLeaseNanos()), Labels: r.GetLabels()})
	if err != nil {
		return nil, toStatus(err)
	}
	return &storepb.CardTokenReply{Card: cardToPB(c), Token: tokenToPB(tok)}, nil
}

func (s *server) RenewClaims(ctx context.Context, r *storepb.RenewClaimsRequest) (*storepb.RenewClaimsReply, error) {
	var holds []board.Hold
	if !r.GetNil() {
		holds = make([]board.Hold, 0, len(r.GetHolds()))
	}
	for _, h := range r.GetHolds() {
		holds = append(holds, board.Hold{Card: h.GetCard(), Token: tokenFromPB(h.GetToken())})
	}
	res, err := s.store.RenewClaims(ctx, holds, time.Duration(r.GetLeaseNanos()))
	if err != nil {
		return nil, toStatus(err)
	}
	out := &storepb.RenewClaimsReply{Nil: res == nil, Results: make([]*storepb.RenewResult, 0, len(res))}
	for _, rr := range res {
		out.Results = append(out.Results, &storepb.RenewResult{Card: rr.Card, LeaseUntil: timeToPB(rr.LeaseUntil), Err: storeErrorToPB(rr.Err)})
	}
	return out, nil
}

func (s *server) SetStateOwned(ctx context.Context, r *storepb.SetStateOwnedRequest) (*storepb.ChangedReply, error) {
	changed, err := s.store.SetStateOwned(ctx, board.OwnedMove{
		Card: r.GetCard(), Token: tokenFromPB(r.GetToken()), To: r.GetTo(), From: r.GetFrom(), Reason: board.Reason(r.GetReason()),
		Retry: r.GetRetry(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &storepb.ChangedReply{Changed: changed}, nil
}

func (s *server) SetLastRunOwned(ctx context.Context, r *storepb.SetLastRunOwnedRequest) (*storepb.Empty, error) {
	return empty(s.store.SetLastRunOwned(ctx, r.GetCard(), tokenFromPB(r.GetToken()), r.GetRunId()))
}

func (s *server) SetAwaitingInputOwned(ctx context.Context, r *storepb.SetAwaitingInputOwnedRequest) (*storepb.Empty, error) {
	return empty(s.store.SetAwaitingInputOwned(ctx, r.GetCard(), tokenFromPB(r.GetToken()), r.GetAwaiting()))
}

func (s *server) SetGaveUpOwned(ctx context.Context, r *storepb.SetGaveUpOwnedRequest) (*storepb.Empty, error) {
	return empty(s.store.SetGaveUpOwned(ctx, r.GetCard(), tokenFromPB(r.GetToken()), gaveUpFromPB(r.GetGaveUp())))
}

func (s *server) ExpireClaimOwned(ctx context.Context, r *storepb.OwnedCardRequest) (*storepb.Empty, error) {
	return empty(s.store.ExpireClaimOwned(ctx, r.GetCard(), tokenFromPB(r.GetToken())))
}

func (s *server) ReleaseOwned(ctx context.Context, r *storepb.OwnedCardRequest) (*storepb.Empty, error) {
	return empty(s.store.ReleaseOwned(ctx, r.GetCard(), tokenFromPB(r.GetToken())))
}

func (s *server) Release(ctx context.Context, r *storepb.ReleaseRequest) (*storepb.Empty, error) {
	return empty(s.store.Release(ctx, r.GetCard(), r.GetMarker(), r.GetActor()))
}

func (s *server) ReleaseExpired(ctx context.Context, r *storepb.ReleaseExpiredRequest) (*storepb.Empty, error) {
	return empty(s.store.ReleaseExpired(ctx, board.ExpiredRelease{
		Card: r.GetCard(), Prev: tokenFromPB(r.GetPrev()), Cutoff: timeFromPB(r.GetCutoff()), Actor: r.GetActor(), State: r.GetState(),
	}))
}

func moveFromPB(r *storepb.MoveRequest) board.Move {
	return board.Move{Card: r.GetCard(), To: r.GetTo(), From: r.GetFrom(), Reason: board.Reason(r.GetReason()), Actor: r.GetActor()}
}

func (s *server) SetState(ctx context.Context, r *storepb.MoveRequest) (*storepb.Empty, error) {
	return empty(s.store.SetState(ctx, moveFromPB(r)))
}

func (s *server) SetStateFrom(ctx context.Context, r *storepb.MoveRequest) (*storepb.ChangedReply, error) {
	changed, err := s.store.SetStateFrom(ctx, moveFromPB(r))
	if err != nil {
		return nil, toStatus(err)
	}
	return &storepb.ChangedReply{Changed: changed}, nil
}

func (s *server) Reopen(ctx context.Context, r *storepb.MoveRequest) (*storepb.Empty, error) {
	return empty(s.store.Reopen(ctx, moveFromPB(r)))
}

func (s *server) AdjustLabels(ctx context.Context, r *storepb.AdjustLabelsRequest) (*storepb.CardReply, error) {
	c, err := s.store.AdjustLabels(ctx, board.LabelChange{
		Card: r.GetCard(), Add: stringsFromPB(r.GetAdd()), Remove: stringsFromPB(r.GetRemove()), Actor: r.GetActor(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &storepb.CardReply{Card: cardToPB(c)}, nil
}

func (s *server) SetLabels(ctx context.Context, r *storepb.SetLabelsRequest) (*storepb.CardReply, error) {
	c, err := s.store.SetLabels(ctx, r.GetCard(), stringsFromPB(r.GetLabels()), r.GetActor())
	if err != nil {
		return nil, toStatus(err)
	}
	return &storepb.CardReply{Card: cardToPB(c)}, nil
}

func (s *server) CreateRun(ctx context.Context, r *storepb.NewRunRequest) (*storepb.RunMessage, error) {
	run, err := s.store.CreateRun(ctx, newRunFromPB(r))
	if err != nil {
		return nil, toStatus(err)
	}
	return runToPB(run), nil
}

func (s *server) UpdateRun(ctx context.Context, r *storepb.RunUpdateRequest) (*storepb.RunMessage, error) {
	run, err := s.store.UpdateRun(ctx, runUpdateFromPB(r))
	if err != nil {
		return nil, toStatus(err)
	}
	return runToPB(run), nil
}

func (s *server) GetRun(ctx context.Context, r *storepb.GetRunRequest) (*storepb.RunMessage, error) {
	run, err := s.store.GetRun(ctx, r.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return runToPB(run), nil
}

func (s *server) Now(ctx context.Context, _ *storepb.Empty) (*storepb.Time, error) {
	t, err := s.store.Now(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return timeToPB(t), nil
}

func (s *server) ListExpiredClaimCandidates(ctx context.Context, r *storepb.ListExpiredRequest) (*storepb.ExpiredPageReply, error) {
	q := board.ExpiredQuery{
		Cutoff: timeFromPB(r.GetCutoff()), Limit: int(r.GetLimit()), After: r.GetAfter(),
	}
	if r.GetShareReaper() != "" || r.GetShareIntervalNs() != 0 {
		q.Share = &board.ReaperShare{Reaper: r.GetShareReaper(), Interval: time.Duration(r.GetShareIntervalNs())}
	}
	page, err := s.store.ListExpiredClaimCandidates(ctx, q)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &storepb.ExpiredPageReply{Next: page.Next, Reapers: int64(page.Reapers), ShareIndex: int64(page.ShareIndex), ShareError: page.ShareError, Cards: make([]*storepb.Card, 0, len(page.Cards))}
	for _, c := range page.Cards {
		out.Cards = append(out.Cards, cardToPB(c))
	}
	return out, nil
}

func (s *server) ListUnleasedRunningClaims(ctx context.Context, r *storepb.ListCutoffRequest) (*storepb.CardsReply, error) {
	cs, err := s.store.ListUnleasedRunningClaims(ctx, timeFromPB(r.GetCutoff()), int(r.GetLimit()))
	if err != nil {
		return nil, toStatus(err)
	}
	return cardsToPB(cs), nil
}

func (s *server) ReclaimExpired(ctx context.Context, r *storepb.ReclaimExpiredRequest) (*storepb.CardTokenReply, error) {
	c, tok, err := s.store.ReclaimExpired(ctx, board.Reclaim{
		Card: r.GetCard(), Prev: tokenFromPB(r.GetPrev()), RecoveryMarker: r.GetRecoveryMarker(),
		Cutoff: timeFromPB(r.GetCutoff()), Lease: time.Duration(r.GetLeaseNanos()),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &storepb.CardTokenReply{Card: cardToPB(c), Token: tokenToPB(tok)}, nil
}

func (s *server) Events(ctx context.Context, r *storepb.EventsRequest) (*storepb.EventsReply, error) {
	evs, err := s.store.Events(ctx, r.GetAfter(), int(r.GetLimit()))
	if err != nil {
		return nil, toStatus(err)
	}
	out := &storepb.EventsReply{Nil: evs == nil, Events: make([]*storepb.Event, 0, len(evs))}
	for _, e := range evs {
		out.Events = append(out.Events, eventToPB(e))
	}
	return out, nil
}

func empty(err error) (*storepb.Empty, error) {
	if err != nil {
		return nil, toStatus(err)
	}
	return &storepb.Empty{}, nil
}
