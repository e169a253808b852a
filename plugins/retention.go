package plugins

import (
	"context"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// The retention verbs (board.Retention, DESIGN.md#retention) on both sides
// of the boundary: the plugin's handlers and the verbs remoteStore and
// Proxy share. A plugin from before protocol 6 is never sent them
// (versionGuard).

func (s *server) Prune(ctx context.Context, r *storepb.PruneRequest) (*storepb.PruneReply, error) {
	res, err := s.store.Prune(ctx, pruneFromPB(r))
	if err != nil {
		return nil, toStatus(err)
	}
	return pruneResultToPB(res), nil
}

func (s *server) DeleteCard(ctx context.Context, r *storepb.DeleteCardRequest) (*storepb.DeleteCardReply, error) {
	res, err := s.store.DeleteCard(ctx, board.DeleteCardParams{ID: r.GetId(), Actor: r.GetActor(), DryRun: r.GetDryRun()})
	if err != nil {
		return nil, toStatus(err)
	}
	return &storepb.DeleteCardReply{Card: cardToPB(res.Card), Runs: int64(res.Runs), DryRun: res.DryRun}, nil
}

func (s *verbs) Prune(ctx context.Context, p board.PruneParams) (board.PruneResult, error) {
	r, err := s.rpc.Prune(ctx, pruneToPB(p))
	if err != nil {
		return board.PruneResult{}, err
	}
	return pruneResultFromPB(r), nil
}

func (s *verbs) DeleteCard(ctx context.Context, p board.DeleteCardParams) (board.DeleteCardResult, error) {
	r, err := s.rpc.DeleteCard(ctx, &storepb.DeleteCardRequest{Id: p.ID, Actor: p.Actor, DryRun: p.DryRun})
	if err != nil {
		return board.DeleteCardResult{}, err
	}
	return board.DeleteCardResult{Card: cardFromPB(r.GetCard()), Runs: int(r.GetRuns()), DryRun: r.GetDryRun()}, nil
}

func pruneToPB(p board.PruneParams) *storepb.PruneRequest {
	return &storepb.PruneRequest{Before: timeToPB(p.Before), Limit: int64(p.Limit), KeepFrom: p.KeepFrom, DryRun: p.DryRun}
}

func pruneFromPB(r *storepb.PruneRequest) board.PruneParams {
	return board.PruneParams{Before: timeFromPB(r.GetBefore()), Limit: int(r.GetLimit()), KeepFrom: r.GetKeepFrom(), DryRun: r.GetDryRun()}
}

func pruneResultToPB(r board.PruneResult) *storepb.PruneReply {
	return &storepb.PruneReply{
		Runs: int64(r.Runs), Events: int64(r.Events), Cards: stringsToPB(r.Cards),
		EventsThrough: r.EventsThrough, More: r.More, DryRun: r.DryRun,
	}
}

func pruneResultFromPB(r *storepb.PruneReply) board.PruneResult {
	cards := stringsFromPB(r.GetCards())
	if cards == nil {
		cards = []string{}
	}
	return board.PruneResult{
		Runs: int(r.GetRuns()), Events: int(r.GetEvents()), Cards: cards,
		EventsThrough: r.GetEventsThrough(), More: r.GetMore(), DryRun: r.GetDryRun(),
	}
}
