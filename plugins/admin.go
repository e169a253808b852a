package plugins

import (
	"context"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// The board-administration verbs (board.BoardAdmin) on every layer of the
// boundary: the plugin's server, and the verbs that remoteStore and Proxy
// share. None of them keeps a copy of the board: each read is one RPC
// under the caller's context (the agent caches the board above the store).

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

func (s *verbs) SetLabelsFrom(ctx context.Context, l board.LabelsFrom) (board.Card, bool, error) {
	r, err := s.rpc.SetLabelsFrom(ctx, &storepb.SetLabelsFromRequest{
		Card: l.Card, Expect: stringsToPB(l.Expect), Labels: stringsToPB(l.Labels), Reason: string(l.Reason), Actor: l.Actor,
	})
	if err != nil {
		return board.Card{}, false, err
	}
	return cardFromPB(r.GetCard()), r.GetChanged(), nil
}
