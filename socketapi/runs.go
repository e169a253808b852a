package socketapi

import (
	"fmt"
	"net/http"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/lease"
)

// handleListRuns lists runs, newest first: one card's (card=) or the
// whole board's, narrowed by status= and limit= (lease.Service.ListRuns).
func (s *Server) handleListRuns(w http.ResponseWriter, r *http.Request, _ caller) error {
	limit, err := queryInt(r, "limit", 0)
	if err != nil {
		return err
	}
	if limit < 0 || limit > lease.MaxRunsLimit {
		return fmt.Errorf("%w: query parameter limit=%d: want 0..%d", apitype.ErrBadRequest, limit, lease.MaxRunsLimit)
	}
	card, err := queryName(r, "card", "card id")
	if err != nil {
		return err
	}
	status, err := queryName(r, "status", "run status")
	if err != nil {
		return err
	}
	runs, err := s.lease.ListRuns(r.Context(), lease.RunFilter{Card: card, Status: board.RunStatus(status), Limit: int(limit)})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, apitype.ListRunsResponse{Runs: runs})
}
