package socketapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
)

func (s *Server) handleCreateCard(w http.ResponseWriter, r *http.Request, c caller) error {
	var req apitype.CreateCardRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	req.Actor = c.actor // who asked is the kernel's answer, never the body's
	card, err := s.cfg.Store.CreateCard(r.Context(), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, card)
}

// maxListLimit bounds one page of cards or events.
const maxListLimit = 10000

func (s *Server) handleListCards(w http.ResponseWriter, r *http.Request, _ caller) error {
	limit, err := queryInt(r, "limit", 0)
	if err != nil {
		return err
	}
	if limit < 0 || limit > maxListLimit {
		return board.Invalid("limit must be between 0 and %d", maxListLimit)
	}
	claimed, err := queryBool(r, "claimed")
	if err != nil {
		return err
	}
	state, err := queryName(r, "state", "state")
	if err != nil {
		return err
	}
	cards, err := s.cfg.Store.ListCards(r.Context(), board.CardFilter{
		State: state, Limit: int(limit), ClaimedOnly: claimed,
	})
	if err != nil {
		return err
	}
	if cards == nil {
		cards = []board.Card{}
	}
	return writeJSON(w, http.StatusOK, apitype.ListCardsResponse{Cards: cards})
}

func (s *Server) handleGetCard(w http.ResponseWriter, r *http.Request, _ caller) error {
	id, err := pathName(r, "id", "card id")
	if err != nil {
		return err
	}
	card, err := s.cfg.Store.GetCard(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, card)
}

func (s *Server) handleGetRun(w http.ResponseWriter, r *http.Request, _ caller) error {
	id, err := pathName(r, "id", "run id")
	if err != nil {
		return err
	}
	run, err := s.cfg.Store.GetRun(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, run)
}

// operatorReason refuses machine reasons from people: they would silence
// the move's effects and blank its actor (DESIGN.md#machine-reasons).
func operatorReason(r board.Reason) error {
	if board.IsMachineReason(r) {
		return board.Invalid("reason %q is machine provenance; an operator move may not carry it", r)
	}
	return nil
}

func (s *Server) handleMoveCard(w http.ResponseWriter, r *http.Request, c caller) error {
	return s.operatorMove(w, r, c, s.cfg.Store.SetState)
}

func (s *Server) handleReopenCard(w http.ResponseWriter, r *http.Request, c caller) error {
	return s.operatorMove(w, r, c, s.cfg.Store.Reopen)
}

// operatorMove is a person's move of one card (a plain move or a reopen):
// no machine reason, the caller as actor, the card as it is now in reply.
func (s *Server) operatorMove(w http.ResponseWriter, r *http.Request, c caller, move func(context.Context, board.Move) error) error {
	id, err := pathName(r, "id", "card id")
	if err != nil {
		return err
	}
	var req apitype.MoveRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	if err := operatorReason(req.Reason); err != nil {
		return err
	}
	if err := move(r.Context(), board.Move{Card: id, To: req.To, Reason: req.Reason, Actor: c.actor}); err != nil {
		return err
	}
	return s.writeCard(w, r, id)
}

// writeCard answers a move with the card as it is now. Launch hints are not
// produced here: the agent's effects layer derives them from the store's
// event log, the one place that also sees cascades and other agents'
// writes, and that knows each event's provenance.
func (s *Server) writeCard(w http.ResponseWriter, r *http.Request, id string) error {
	card, err := s.cfg.Store.GetCard(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, card)
}

func (s *Server) handleAdjustLabels(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := pathName(r, "id", "card id")
	if err != nil {
		return err
	}
	var req apitype.AdjustLabelsRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	card, err := s.cfg.Store.AdjustLabels(r.Context(), board.LabelChange{
		Card: id, Add: req.Add, Remove: req.Remove, Actor: c.actor,
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, card)
}

func (s *Server) handleSetLabels(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := pathName(r, "id", "card id")
	if err != nil {
		return err
	}
	var req apitype.SetLabelsRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	if req.Labels == nil {
		return board.Invalid("labels is required (use [] to clear)")
	}
	card, err := s.cfg.Store.SetLabels(r.Context(), id, req.Labels, c.actor)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, card)
}

// handleForceRelease is the operator's steal: read the holder, release
// exactly that holder (a claim that changed hands in between is a clean
// conflict), stop renewing it, and tell its worker on the watch stream.
func (s *Server) handleForceRelease(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := pathName(r, "id", "card id")
	if err != nil {
		return err
	}
	card, err := s.cfg.Store.GetCard(r.Context(), id)
	if err != nil {
		return err
	}
	resp := apitype.ForceReleaseResponse{Card: id}
	if !card.Claimed() {
		return writeJSON(w, http.StatusOK, resp)
	}
	if err := s.cfg.Store.Release(r.Context(), id, card.Claim, c.actor); err != nil {
		return err
	}
	s.cfg.Claims.RemoveHold(id, card.Token())
	s.Notify(apitype.Frame{
		Type: apitype.FrameClaimLost, Card: id, Epoch: card.ClaimEpoch, Marker: card.Claim,
		Reason: apitype.LostForceReleased,
	})
	s.cfg.Logger.Info("claim force-released", "card", id, "holder", card.Claim, "epoch", card.ClaimEpoch, "actor", c.actor)
	resp.Holder, resp.Epoch = card.Claim, card.ClaimEpoch
	return writeJSON(w, http.StatusOK, resp)
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request, _ caller) error {
	var st apitype.Status
	if s.cfg.Status != nil {
		var err error
		if st, err = s.cfg.Status(r.Context()); err != nil {
			return err
		}
	} else {
		st = apitype.Status{Host: s.cfg.Host, Liveness: s.cfg.Liveness(), LeaseMS: s.cfg.Lease().Milliseconds(), Socket: s.cfg.Path}
		now := s.cfg.Clock.Now()
		for _, h := range s.cfg.Claims.Held() {
			st.Claims = append(st.Claims, apitype.HeldClaim{
				Card: h.Hold.Card, Marker: h.Hold.Token.Marker, Epoch: h.Hold.Token.Epoch,
				PID: h.Owner.PID, TrustedMS: s.remaining(h, now).Milliseconds(),
			})
		}
	}
	st.Draining = st.Draining || s.draining.Load()
	if st.Claims == nil {
		st.Claims = []apitype.HeldClaim{}
	}
	return writeJSON(w, http.StatusOK, st)
}

func (s *Server) handleBoard(w http.ResponseWriter, r *http.Request, _ caller) error {
	b, err := s.storedBoard(r.Context()) // admin.go: the definition as stored now
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, apitype.BoardOf(b))
}

func (s *Server) handleReaperPass(w http.ResponseWriter, r *http.Request, _ caller) error {
	dry, err := queryBool(r, "dry_run")
	if err != nil {
		return err
	}
	if s.cfg.ReaperPass == nil {
		return fmt.Errorf("%w: this agent has no reaper", apitype.ErrUnavailable)
	}
	pass, err := s.cfg.ReaperPass(r.Context(), dry)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, pass)
}

// eventsPage is the page size of a following events stream.
const eventsPage = 256

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request, _ caller) error {
	after, err := queryInt(r, "after", 0)
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", 100)
	if err != nil {
		return err
	}
	if after < 0 || limit <= 0 || limit > maxListLimit {
		return board.Invalid("want after >= 0 and 0 < limit <= %d", maxListLimit)
	}
	follow, err := queryBool(r, "follow")
	if err != nil {
		return err
	}
	ctx := r.Context()
	if !follow {
		evs, err := s.cfg.Store.Events(ctx, after, int(limit))
		if err != nil {
			return err
		}
		if evs == nil {
			evs = []board.Event{}
		}
		return writeJSON(w, http.StatusOK, apitype.EventsResponse{Events: evs})
	}

	// Follow: NDJSON, one event per line, for as long as the caller reads.
	// Writes this server makes wake the loop at once; writes by other
	// agents on a shared store are found by the poll.
	first, err := s.cfg.Store.Events(ctx, after, eventsPage)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	poll := time.NewTicker(s.cfg.EventPoll)
	defer poll.Stop()
	evs := first
	for {
		woke := s.wrote.wait()
		for _, ev := range evs {
			if err := enc.Encode(ev); err != nil {
				return nil
			}
			after = ev.Seq
		}
		if err := bw.Flush(); err != nil {
			return nil
		}
		if err := rc.Flush(); err != nil {
			return nil
		}
		if len(evs) < eventsPage {
			select {
			case <-ctx.Done():
				return nil
			case <-s.closing:
				return nil
			case <-woke:
			case <-poll.C:
			}
		}
		if evs, err = s.cfg.Store.Events(ctx, after, eventsPage); err != nil {
			// The status line is gone; end the stream and let the client
			// resume from the last sequence it saw.
			s.cfg.Logger.Warn("events follow: reading the store", "err", err)
			return nil
		}
	}
}
