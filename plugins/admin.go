package plugins

import (
	"context"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// The board-administration verbs (board.BoardAdmin) on every layer of the
// boundary: the plugin's server, the agent's remoteStore, and the Proxy.
// None of them keeps a copy of the board: each read is one RPC under the
// caller's context (the agent caches the board above the store).

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

func (s *remoteStore) LoadBoard(ctx context.Context) (board.Board, error) {
	r, err := s.rpc.LoadBoard(ctx, &storepb.BoardRequest{})
	if err != nil {
		return board.Board{}, callError(ctx, "LoadBoard", err)
	}
	return boardFromPB(r.GetBoard()), nil
}

func (s *remoteStore) SetBoard(ctx context.Context, expect, next board.Board) (board.Board, bool, error) {
	r, err := s.rpc.SetBoard(ctx, &storepb.SetBoardRequest{Expect: boardToPB(expect), Next: boardToPB(next)})
	if err != nil {
		return board.Board{}, false, callError(ctx, "SetBoard", err)
	}
	return boardFromPB(r.GetBoard()), r.GetChanged(), nil
}

func (s *remoteStore) SetLabelsFrom(ctx context.Context, l board.LabelsFrom) (board.Card, bool, error) {
	r, err := s.rpc.SetLabelsFrom(ctx, &storepb.SetLabelsFromRequest{
		Card: l.Card, Expect: stringsToPB(l.Expect), Labels: stringsToPB(l.Labels), Reason: string(l.Reason), Actor: l.Actor,
	})
	if err != nil {
		return board.Card{}, false, callError(ctx, "SetLabelsFrom", err)
	}
	return cardFromPB(r.GetCard()), r.GetChanged(), nil
}

func (p *Proxy) LoadBoard(ctx context.Context) (board.Board, error) {
	return call(p, "LoadBoard", func(s *remoteStore) (board.Board, error) { return s.LoadBoard(ctx) })
}

func (p *Proxy) SetBoard(ctx context.Context, expect, next board.Board) (board.Board, bool, error) {
	res, err := call(p, "SetBoard", func(s *remoteStore) (pair[board.Board, bool], error) {
		b, changed, err := s.SetBoard(ctx, expect, next)
		return pair[board.Board, bool]{b, changed}, err
	})
	return res.a, res.b, err
}

func (p *Proxy) SetLabelsFrom(ctx context.Context, l board.LabelsFrom) (board.Card, bool, error) {
	res, err := call(p, "SetLabelsFrom", func(s *remoteStore) (pair[board.Card, bool], error) {
		c, changed, err := s.SetLabelsFrom(ctx, l)
		return pair[board.Card, bool]{c, changed}, err
	})
	return res.a, res.b, err
}
