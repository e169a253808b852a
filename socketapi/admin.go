package socketapi

import (
	"context"
	"encoding/json"
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
	a, err := s.boardAdmin(c.actor, false, nil)
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

// boardAdmin returns a walker over the store acting for actor (dryRun,
// progress: lease.Service.Admin).
func (s *Server) boardAdmin(actor string, dryRun bool, progress func(done, total int)) (*boardadmin.Admin, error) {
	return s.lease.Admin(actor, dryRun, progress)
}

// sweepProgressEvery is how many cards a walk handles between two
// progress frames; its last card always sends one.
const sweepProgressEvery = 100

// storedBoard is the board as stored now: another agent sharing the store
// may have changed it since this one last looked.
func (s *Server) storedBoard(ctx context.Context) (board.Board, error) {
	return s.lease.StoredBoard(ctx)
}

// runAdmin runs one operation. ?dry_run=true decides and writes nothing;
// ?progress=true answers with NDJSON (apitype.SweepFrame): a progress
// frame every sweepProgressEvery cards and at the last, then the report.
// The stream's status line goes out with its first frame, so a refusal
// before the walk started is an ordinary error answer; one after it is
// the stream's last frame.
func (s *Server) runAdmin(w http.ResponseWriter, r *http.Request, c caller, req any, op func(ctx context.Context, a *boardadmin.Admin) (board.SweepReport, error)) error {
	dry, err := queryBool(r, "dry_run")
	if err != nil {
		return err
	}
	streamed, err := queryBool(r, "progress")
	if err != nil {
		return err
	}
	if err := s.decode(w, r, req); err != nil {
		return err
	}
	var st *sweepStream
	var progress func(done, total int)
	if streamed {
		st = &sweepStream{w: w, rc: http.NewResponseController(w)}
		progress = func(done, total int) {
			if done%sweepProgressEvery == 0 || done == total {
				st.send(apitype.SweepFrame{Progress: &apitype.SweepProgress{Done: done, Total: total}})
			}
		}
	}
	a, err := s.boardAdmin(c.actor, dry, progress)
	if err != nil {
		return err
	}
	rep, err := op(r.Context(), a)
	if err != nil {
		if st != nil && st.started {
			_, body := apitype.ErrorFor(err)
			s.cfg.Logger.Warn("board administration failed mid-walk", "actor", c.actor, "err", err)
			st.send(apitype.SweepFrame{Error: &body})
			return nil
		}
		return err
	}
	if !rep.DryRun {
		s.cfg.Logger.Info("board administration", "op", rep.Op, "actor", c.actor, "cards", rep.Cards,
			"changed", len(rep.Changed), "unchanged", rep.Unchanged, "gone", len(rep.Gone), "contended", len(rep.Contended))
	}
	if st != nil {
		st.send(apitype.SweepFrame{Report: &rep})
		return nil
	}
	return writeJSON(w, http.StatusOK, rep)
}

// sweepStream writes a board route's NDJSON answer, one flushed frame at
// a time, the status line with the first. A write that fails (the caller
// went away) is not retried; the walk goes on to its end regardless, as
// it does when the caller of a plain answer hangs up.
type sweepStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	failed  bool
}

func (st *sweepStream) send(f apitype.SweepFrame) {
	if st.failed {
		return
	}
	if !st.started {
		st.started = true
		st.w.Header().Set("Content-Type", "application/x-ndjson")
		st.w.WriteHeader(http.StatusOK)
	}
	enc := json.NewEncoder(st.w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(f); err != nil {
		st.failed = true
		return
	}
	if err := st.rc.Flush(); err != nil {
		st.failed = true
	}
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
