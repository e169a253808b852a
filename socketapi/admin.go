package socketapi

import (
	"context"
	"net/http"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/boardadmin"
)

// adminRoutes are the board-administration operator routes (DESIGN.md#label-sweeps).
// Each runs one walker of package boardadmin to completion and answers
// with its report; a walk's contended cards are in the report, not an
// error, because the rest of the walk did complete.
func (s *Server) adminRoutes() []route {
	return []route{
		{"POST", "/v1/board/states/rename", permOperator, s.handleRenameState},
		{"POST", "/v1/board/states/delete", permOperator, s.handleDeleteState},
		{"POST", "/v1/board/labels/rename", permOperator, s.handleRenameLabel},
		{"POST", "/v1/board/labels/merge", permOperator, s.handleMergeLabels},
		{"POST", "/v1/board/labels/delete", permOperator, s.handleDeleteLabel},
		{"POST", "/v1/board/retry", permOperator, s.handleBoardRetry},
	}
}

// handleBoardRetry sets the board's default retry policy
// (DESIGN.md#retries): a write of the definition, no sweep.
func (s *Server) handleBoardRetry(w http.ResponseWriter, r *http.Request, c caller) error {
	var req apitype.BoardRetryRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	a, err := s.boardAdmin(c.actor)
	if err != nil {
		return err
	}
	b, err := a.SetRetry(r.Context(), req)
	if err != nil {
		return err
	}
	s.cfg.Logger.Info("board administration", "op", "board retry", "actor", c.actor, "retry", b.RetryFor(board.Card{}).String())
	return writeJSON(w, http.StatusOK, apitype.BoardOf(b))
}

// boardAdmin returns a walker over the store acting for actor.
func (s *Server) boardAdmin(actor string) (*boardadmin.Admin, error) {
	return s.lease.Admin(actor)
}

// storedBoard is the board as stored now: another agent sharing the store
// may have changed it since this one last looked.
func (s *Server) storedBoard(ctx context.Context) (board.Board, error) {
	return s.lease.StoredBoard(ctx)
}

func (s *Server) runAdmin(w http.ResponseWriter, r *http.Request, c caller, req any, op func(ctx context.Context, a *boardadmin.Admin) (board.SweepReport, error)) error {
	if err := s.decode(w, r, req); err != nil {
		return err
	}
	a, err := s.boardAdmin(c.actor)
	if err != nil {
		return err
	}
	rep, err := op(r.Context(), a)
	if err != nil {
		return err
	}
	s.cfg.Logger.Info("board administration", "op", rep.Op, "actor", c.actor, "cards", rep.Cards,
		"changed", len(rep.Changed), "unchanged", rep.Unchanged, "gone", len(rep.Gone), "contended", len(rep.Contended))
	return writeJSON(w, http.StatusOK, rep)
}

func (s *Server) handleRenameState(w http.ResponseWriter, r *http.Request, c caller) error {
	var req apitype.RenameRequest
	return s.runAdmin(w, r, c, &req, func(ctx context.Context, a *boardadmin.Admin) (board.SweepReport, error) {
		return a.RenameState(ctx, req.From, req.To)
	})
}

func (s *Server) handleDeleteState(w http.ResponseWriter, r *http.Request, c caller) error {
	var req apitype.DeleteStateRequest
	return s.runAdmin(w, r, c, &req, func(ctx context.Context, a *boardadmin.Admin) (board.SweepReport, error) {
		return a.DeleteState(ctx, req.State, req.Into)
	})
}

func (s *Server) handleRenameLabel(w http.ResponseWriter, r *http.Request, c caller) error {
	var req apitype.RenameRequest
	return s.runAdmin(w, r, c, &req, func(ctx context.Context, a *boardadmin.Admin) (board.SweepReport, error) {
		return a.RenameLabel(ctx, req.From, req.To)
	})
}

func (s *Server) handleMergeLabels(w http.ResponseWriter, r *http.Request, c caller) error {
	var req apitype.MergeLabelsRequest
	return s.runAdmin(w, r, c, &req, func(ctx context.Context, a *boardadmin.Admin) (board.SweepReport, error) {
		return a.MergeLabels(ctx, req.From, req.Into)
	})
}

func (s *Server) handleDeleteLabel(w http.ResponseWriter, r *http.Request, c caller) error {
	var req apitype.DeleteLabelRequest
	return s.runAdmin(w, r, c, &req, func(ctx context.Context, a *boardadmin.Admin) (board.SweepReport, error) {
		return a.DeleteLabel(ctx, req.Label)
	})
}
