package socketapi

import (
	"net/http"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/lease"
)

// The worker routes. Each handler decodes, makes one call into the lease
// service, and encodes; the service owns grants, tracking, ownership checks
// and the lifecycle (package lease).

func (s *Server) pingInterval() time.Duration { return s.cfg.Lease() / 3 }

// claimResponse encodes a grant.
func (s *Server) claimResponse(g lease.Grant) apitype.ClaimResponse {
	return apitype.ClaimResponse{
		Card:      g.Card,
		Token:     g.Token,
		LeaseMS:   g.Lease.Milliseconds(),
		TrustedMS: g.Trusted.Milliseconds(),
		Liveness:  s.cfg.Liveness(),
		PingMS:    s.pingInterval().Milliseconds(),
	}
}

func (s *Server) handleClaim(w http.ResponseWriter, r *http.Request, c caller) error {
	var req apitype.ClaimRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	g, err := s.lease.Claim(r.Context(), c.worker, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, s.claimResponse(g))
}

func (s *Server) handleStart(w http.ResponseWriter, r *http.Request, c caller) error {
	var req apitype.StartRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	st, err := s.lease.Start(r.Context(), c.worker, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, apitype.StartResponse{
		ClaimResponse: s.claimResponse(st.Grant), Run: st.Run, Resumed: st.Resumed,
	})
}

func (s *Server) handleFinish(w http.ResponseWriter, r *http.Request, c caller) error {
	card, err := pathName(r, "card", "card id")
	if err != nil {
		return err
	}
	var req apitype.FinishRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	f, err := s.lease.Finish(r.Context(), c.worker, card, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, apitype.FinishResponse{Card: f.Card, Run: f.Run})
}

func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request, c caller) error {
	card, err := pathName(r, "card", "card id")
	if err != nil {
		return err
	}
	epoch, err := queryInt(r, "epoch", 0)
	if err != nil {
		return err
	}
	if err := s.lease.Release(r.Context(), c.worker, card, epoch); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) handleOwnedState(w http.ResponseWriter, r *http.Request, c caller) error {
	card, err := pathName(r, "card", "card id")
	if err != nil {
		return err
	}
	var req apitype.SetStateRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	changed, err := s.lease.SetState(r.Context(), c.worker, card, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, apitype.ChangedResponse{Changed: changed})
}

func (s *Server) handleOwnedLastRun(w http.ResponseWriter, r *http.Request, c caller) error {
	return ownedWrite(s, w, r, func(card string, req *apitype.SetLastRunRequest) error {
		return s.lease.SetLastRun(r.Context(), c.worker, card, req.Epoch, req.RunID)
	})
}

func (s *Server) handleOwnedAwaitingInput(w http.ResponseWriter, r *http.Request, c caller) error {
	return ownedWrite(s, w, r, func(card string, req *apitype.SetAwaitingInputRequest) error {
		return s.lease.SetAwaitingInput(r.Context(), c.worker, card, req.Epoch, req.AwaitingInput)
	})
}

func (s *Server) handleOwnedGaveUp(w http.ResponseWriter, r *http.Request, c caller) error {
	return ownedWrite(s, w, r, func(card string, req *apitype.SetGaveUpRequest) error {
		return s.lease.SetGaveUp(r.Context(), c.worker, card, req.Epoch, req.GaveUp)
	})
}

// ownedWrite is the shape every answer-less owner write shares: decode the
// request for the card in the path, write, answer 204.
func ownedWrite[T any](s *Server, w http.ResponseWriter, r *http.Request, write func(string, *T) error) error {
	card, err := pathName(r, "card", "card id")
	if err != nil {
		return err
	}
	req := new(T)
	if err := s.decode(w, r, req); err != nil {
		return err
	}
	if err := write(card, req); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) handleStartRun(w http.ResponseWriter, r *http.Request, c caller) error {
	card, err := pathName(r, "card", "card id")
	if err != nil {
		return err
	}
	var req apitype.StartRunRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	run, err := s.lease.CreateRun(r.Context(), c.worker, card, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, run)
}

func (s *Server) handleUpdateRun(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := pathName(r, "id", "run id")
	if err != nil {
		return err
	}
	var req apitype.UpdateRunRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	run, err := s.lease.UpdateRun(r.Context(), c.worker, id, board.UpdateRunParams{
		IfStatus: req.IfStatus, Status: req.Status, Continuation: req.Continuation,
		FailureCode: req.FailureCode, Checkpoint: req.Checkpoint,
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, run)
}

func (s *Server) handleKeepalive(w http.ResponseWriter, r *http.Request, c caller) error {
	if err := s.decode(w, r, &struct{}{}); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, apitype.KeepaliveResponse{Claims: s.lease.Keepalive(c.worker)})
}
