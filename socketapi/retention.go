package socketapi

import (
	"net/http"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
)

// handleDeleteCard is the operator's card delete (lease.Service.DeleteCard,
// DESIGN.md#retention). With force=true a claimed card is force-released
// first, and its holder's worker is told on the watch stream.
func (s *Server) handleDeleteCard(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := pathName(r, "id", "card id")
	if err != nil {
		return err
	}
	force, err := queryBool(r, "force")
	if err != nil {
		return err
	}
	res, tok, err := s.lease.DeleteCard(r.Context(), c.actor, id, force)
	if !tok.IsZero() {
		s.Notify(apitype.Frame{
			Type: apitype.FrameClaimLost, Card: id, Epoch: tok.Epoch, Marker: tok.Marker,
			Reason: apitype.LostForceReleased,
		})
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, apitype.DeleteCardResponse{Card: res.Card, Runs: res.Runs, Holder: tok.Marker, Epoch: tok.Epoch})
}

// handlePrune is the operator's prune now (lease.Service.Prune).
func (s *Server) handlePrune(w http.ResponseWriter, r *http.Request, c caller) error {
	var req apitype.PruneRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	before, res, err := s.lease.Prune(r.Context(), c.actor, time.Duration(req.OlderThanMS)*time.Millisecond, req.Limit, req.DryRun)
	if err != nil {
		return err
	}
	cards := res.Cards
	if cards == nil {
		cards = []string{}
	}
	return writeJSON(w, http.StatusOK, apitype.PruneResponse{
		Before: before, Runs: res.Runs, Events: res.Events, Cards: cards,
		EventsThrough: res.EventsThrough, More: res.More, DryRun: res.DryRun,
	})
}
