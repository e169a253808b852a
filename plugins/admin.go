package plugins

import (
	"context"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// The board-administration verbs (board.BoardAdmin) on every layer of the
// boundary: the plugin's server, the agent's remoteStore, and the Proxy.
// The remote side's cached board (what Board() returns, since Board() has
// no context to call with) is refreshed by every LoadBoard and SetBoard
// that passes through, so an agent that administers its board sees the
// result at once.

var (
	_ board.BoardAdmin = (*remoteStore)(nil)
	_ board.BoardAdmin = (*Proxy)(nil)
)

func (s *server) LoadBoard(ctx context.Context, _ *storepb.BoardRequest) (*storepb.BoardReply, error) {
	b, err := s.store.LoadBoard(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &storepb.BoardReply{Board: boardToPB(b)}, nil
}

func (s *server) SetBoard(ctx context.Context, r *storepb.SetBoardRequest) (*storepb.SetBoardReply, error) {
	b, changed, err := s.store.SetBoard(ctx, boardFromPB(r.GetExpect()), boardFromPB(r.GetNext()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &storepb.SetBoardReply{Board: boardToPB(b), Changed: changed}, nil
}

func (s *server) SetLabelsFrom(ctx context.Context, r *storepb.SetLabelsFromRequest) (*storepb.CardChangedReply, error) {
	c, changed, err := s.store.SetLabelsFrom(ctx, board.LabelsFrom{
		Card: r.GetCard(), Expect: stringsFromPB(r.GetExpect()), Labels: stringsFromPB(r.GetLabels()),
		Reason: board.Reason(r.GetReason()), Actor: r.GetActor(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &storepb.CardChangedReply{Card: cardToPB(c), Changed: changed}, nil
}

func (s *remoteStore) cache(b board.Board) {
	s.mu.Lock()
	s.board = b
	s.mu.Unlock()
}

func (s *verbs) LoadBoard(ctx context.Context) (board.Board, error) {
	r, err := s.rpc.LoadBoard(ctx, &storepb.BoardRequest{})
	if err != nil {
		return board.Board{}, err
	}
	return boardFromPB(r.GetBoard()), nil
}

func (s *verbs) SetBoard(ctx context.Context, expect, next board.Board) (board.Board, bool, error) {
	r, err := s.rpc.SetBoard(ctx, &storepb.SetBoardRequest{Expect: boardToPB(expect), Next: boardToPB(next)})
	if err != nil {
		return board.Board{}, false, err
	}
	return boardFromPB(r.GetBoard()), r.GetChanged(), nil
}

func (s *remoteStore) LoadBoard(ctx context.Context) (board.Board, error) {
	b, err := s.verbs.LoadBoard(ctx)
	if err == nil {
		s.cache(b)
	}
	return b, err
}

func (s *remoteStore) SetBoard(ctx context.Context, expect, next board.Board) (board.Board, bool, error) {
	b, changed, err := s.verbs.SetBoard(ctx, expect, next)
	if err == nil {
		s.cache(b)
	}
	return b, changed, err
}

func (s *verbs) SetLabelsFrom(ctx context.Context, l board.LabelsFrom) (board.Card, bool, error) {
	r, err := s.rpc.SetLabelsFrom(ctx, &storepb.SetLabelsFromRequest{
		Card: l.Card, Expect: stringsToPB(l.Expect), Labels: stringsToPB(l.Labels), Reason: string(l.Reason), Actor: l.Actor,
	})
	if err != nil {
		return board.Card{}, false, err
	}
	return cardFromPB(r.GetCard()), r.GetChanged(), nil
}

// cacheBoard records a board read through the current plugin as what
// Board() returns.
func (p *Proxy) cacheBoard(b board.Board) {
	p.mu.Lock()
	p.board = b
	p.boardAt = time.Now()
	p.mu.Unlock()
}

// boardRefresh is how old the cached board may grow before Board starts a
// re-read: another agent sharing the store may have run a state sweep.
const boardRefresh = 2 * time.Second

// refreshBoard starts one background LoadBoard when the cache is stale.
// Board has no context to wait with, so it returns the cached board at
// once; the re-read runs under the Proxy's own lifetime and a bound.
func (p *Proxy) refreshBoard(stale bool) {
	if !stale || !p.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer p.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		defer cancel()
		_, _ = p.LoadBoard(ctx)
	}()
}

func (p *Proxy) LoadBoard(ctx context.Context) (board.Board, error) {
	b, err := p.verbs.LoadBoard(ctx)
	if err == nil {
		p.cacheBoard(b)
	}
	return b, err
}

func (p *Proxy) SetBoard(ctx context.Context, expect, next board.Board) (board.Board, bool, error) {
	b, changed, err := p.verbs.SetBoard(ctx, expect, next)
	if err == nil {
		p.cacheBoard(b)
	}
	return b, changed, err
}
