package serve

//go:generate go run ../../internal/storegen -layer serve -root ../..

import (
	"context"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// server serves a board.Store over gRPC. Each handler passes the RPC's
// context to the store, so the agent's deadline and cancellation reach the
// backend, and returns store errors through wire.ToStatus so their
// identity survives the trip. The handlers of the verbs that need nothing
// but the pattern are generated (verbs_gen.go, DESIGN.md#verb-shape).
type server struct {
	storepb.UnimplementedStoreServer
	store board.Store
}

func (s *server) Board(ctx context.Context, _ *storepb.BoardRequest) (*storepb.BoardReply, error) {
	b, err := s.store.LoadBoard(ctx)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	t := s.store.Traits()
	return &storepb.BoardReply{Board: wire.ToBoardMessage(b), Traits: &storepb.TraitsMessage{
		Shared: t.Shared, ServerClock: t.ServerClock, Outbox: t.Outbox,
	}}, nil
}

func empty(err error) (*storepb.Empty, error) {
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &storepb.Empty{}, nil
}
