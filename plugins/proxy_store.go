package plugins

import (
	"context"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// The board.Store verbs of Proxy: each one fails fast while the plugin is
// down, and otherwise is one RPC carrying the caller's ctx.

// Traits are what the plugin declared at its handshake (its first Board
// reply); a restarted plugin declares them again.
func (p *Proxy) Traits() board.Traits {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.traits
}

func (p *Proxy) CreateCard(ctx context.Context, c board.NewCard) (board.Card, error) {
	return call(p, "CreateCard", func(s *remoteStore) (board.Card, error) { return s.CreateCard(ctx, c) })
}

func (p *Proxy) GetCard(ctx context.Context, id string) (board.Card, error) {
	return call(p, "GetCard", func(s *remoteStore) (board.Card, error) { return s.GetCard(ctx, id) })
}

func (p *Proxy) ListCards(ctx context.Context, f board.CardFilter) ([]board.Card, error) {
	return call(p, "ListCards", func(s *remoteStore) ([]board.Card, error) { return s.ListCards(ctx, f) })
}

func (p *Proxy) Dependents(ctx context.Context, id string) ([]board.Card, error) {
	return call(p, "Dependents", func(s *remoteStore) ([]board.Card, error) { return s.Dependents(ctx, id) })
}

func (p *Proxy) Claim(ctx context.Context, r board.ClaimRequest) (board.Card, board.ClaimToken, error) {
	res, err := call(p, "Claim", func(s *remoteStore) (pair[board.Card, board.ClaimToken], error) {
		x, y, err := s.Claim(ctx, r)
		return pair[board.Card, board.ClaimToken]{x, y}, err
	})
	return res.a, res.b, err
}

func (p *Proxy) Start(ctx context.Context, r board.StartRequest) (board.Started, error) {
	return call(p, "Start", func(s *remoteStore) (board.Started, error) { return s.Start(ctx, r) })
}

func (p *Proxy) Finish(ctx context.Context, r board.FinishRequest) (board.Finished, error) {
	return call(p, "Finish", func(s *remoteStore) (board.Finished, error) { return s.Finish(ctx, r) })
}

func (p *Proxy) ClaimNext(ctx context.Context, r board.ClaimNextRequest) (board.Card, board.ClaimToken, error) {
	res, err := call(p, "ClaimNext", func(s *remoteStore) (pair[board.Card, board.ClaimToken], error) {
		x, y, err := s.ClaimNext(ctx, r)
		return pair[board.Card, board.ClaimToken]{x, y}, err
	})
	return res.a, res.b, err
}

func (p *Proxy) RenewClaims(ctx context.Context, holds []board.Hold, lease time.Duration) ([]board.RenewResult, error) {
	return call(p, "RenewClaims", func(s *remoteStore) ([]board.RenewResult, error) { return s.RenewClaims(ctx, holds, lease) })
}

func (p *Proxy) SetStateOwned(ctx context.Context, m board.OwnedMove) (bool, error) {
	return call(p, "SetStateOwned", func(s *remoteStore) (bool, error) { return s.SetStateOwned(ctx, m) })
}

func (p *Proxy) SetLastRunOwned(ctx context.Context, card string, tok board.ClaimToken, runID string) error {
	_, err := call(p, "SetLastRunOwned", func(s *remoteStore) (struct{}, error) { return struct{}{}, s.SetLastRunOwned(ctx, card, tok, runID) })
	return err
}

func (p *Proxy) SetAwaitingInputOwned(ctx context.Context, card string, tok board.ClaimToken, awaiting bool) error {
	_, err := call(p, "SetAwaitingInputOwned", func(s *remoteStore) (struct{}, error) {
		return struct{}{}, s.SetAwaitingInputOwned(ctx, card, tok, awaiting)
	})
	return err
}

func (p *Proxy) SetGaveUpOwned(ctx context.Context, card string, tok board.ClaimToken, g *board.GaveUp) error {
	_, err := call(p, "SetGaveUpOwned", func(s *remoteStore) (struct{}, error) { return struct{}{}, s.SetGaveUpOwned(ctx, card, tok, g) })
	return err
}

func (p *Proxy) ExpireClaimOwned(ctx context.Context, card string, tok board.ClaimToken) error {
	_, err := call(p, "ExpireClaimOwned", func(s *remoteStore) (struct{}, error) { return struct{}{}, s.ExpireClaimOwned(ctx, card, tok) })
	return err
}

func (p *Proxy) ReleaseOwned(ctx context.Context, card string, tok board.ClaimToken) error {
	_, err := call(p, "ReleaseOwned", func(s *remoteStore) (struct{}, error) { return struct{}{}, s.ReleaseOwned(ctx, card, tok) })
	return err
}

func (p *Proxy) ReleaseExpired(ctx context.Context, r board.ExpiredRelease) error {
	_, err := call(p, "ReleaseExpired", func(s *remoteStore) (struct{}, error) { return struct{}{}, s.ReleaseExpired(ctx, r) })
	return err
}

func (p *Proxy) Release(ctx context.Context, card, marker, actor string) error {
	_, err := call(p, "Release", func(s *remoteStore) (struct{}, error) { return struct{}{}, s.Release(ctx, card, marker, actor) })
	return err
}

func (p *Proxy) SetState(ctx context.Context, m board.Move) error {
	_, err := call(p, "SetState", func(s *remoteStore) (struct{}, error) { return struct{}{}, s.SetState(ctx, m) })
	return err
}

func (p *Proxy) SetStateFrom(ctx context.Context, m board.Move) (bool, error) {
	return call(p, "SetStateFrom", func(s *remoteStore) (bool, error) { return s.SetStateFrom(ctx, m) })
}

func (p *Proxy) Reopen(ctx context.Context, m board.Move) error {
	_, err := call(p, "Reopen", func(s *remoteStore) (struct{}, error) { return struct{}{}, s.Reopen(ctx, m) })
	return err
}

func (p *Proxy) AdjustLabels(ctx context.Context, c board.LabelChange) (board.Card, error) {
	return call(p, "AdjustLabels", func(s *remoteStore) (board.Card, error) { return s.AdjustLabels(ctx, c) })
}

func (p *Proxy) SetLabels(ctx context.Context, card string, labels []string, actor string) (board.Card, error) {
	return call(p, "SetLabels", func(s *remoteStore) (board.Card, error) { return s.SetLabels(ctx, card, labels, actor) })
}

func (p *Proxy) CreateRun(ctx context.Context, r board.NewRun) (board.Run, error) {
	return call(p, "CreateRun", func(s *remoteStore) (board.Run, error) { return s.CreateRun(ctx, r) })
}

func (p *Proxy) UpdateRun(ctx context.Context, u board.RunUpdate) (board.Run, error) {
	return call(p, "UpdateRun", func(s *remoteStore) (board.Run, error) { return s.UpdateRun(ctx, u) })
}

func (p *Proxy) GetRun(ctx context.Context, id string) (board.Run, error) {
	return call(p, "GetRun", func(s *remoteStore) (board.Run, error) { return s.GetRun(ctx, id) })
}

func (p *Proxy) Now(ctx context.Context) (time.Time, error) {
	return call(p, "Now", func(s *remoteStore) (time.Time, error) { return s.Now(ctx) })
}

func (p *Proxy) ListExpiredClaimCandidates(ctx context.Context, q board.ExpiredQuery) (board.ExpiredPage, error) {
	return call(p, "ListExpiredClaimCandidates", func(s *remoteStore) (board.ExpiredPage, error) { return s.ListExpiredClaimCandidates(ctx, q) })
}

func (p *Proxy) ListUnleasedRunningClaims(ctx context.Context, cutoff time.Time, limit int) ([]board.Card, error) {
	return call(p, "ListUnleasedRunningClaims", func(s *remoteStore) ([]board.Card, error) { return s.ListUnleasedRunningClaims(ctx, cutoff, limit) })
}

func (p *Proxy) ReclaimExpired(ctx context.Context, r board.Reclaim) (board.Card, board.ClaimToken, error) {
	res, err := call(p, "ReclaimExpired", func(s *remoteStore) (pair[board.Card, board.ClaimToken], error) {
		x, y, err := s.ReclaimExpired(ctx, r)
		return pair[board.Card, board.ClaimToken]{x, y}, err
	})
	return res.a, res.b, err
}

func (p *Proxy) Events(ctx context.Context, after int64, limit int) ([]board.Event, error) {
	return call(p, "Events", func(s *remoteStore) ([]board.Event, error) { return s.Events(ctx, after, limit) })
}

// pair carries a two-value result through call.
type pair[A, B any] struct {
	a A
	b B
}
