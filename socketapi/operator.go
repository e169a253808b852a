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
	card, err := s.lease.CreateCard(r.Context(), c.actor, req)
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
		return fmt.Errorf("%w: query parameter limit=%d: want 0..%d", apitype.ErrBadRequest, limit, maxListLimit)
	}
	claimed, err := queryBool(r, "claimed")
	if err != nil {
		return err
	}
	state, err := queryName(r, "state", "state")
	if err != nil {
		return err
	}
	cards, err := s.lease.ListCards(r.Context(), board.ListCardsParams{
		State: state, Limit: int(limit), ClaimedOnly: claimed,
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, apitype.ListCardsResponse{Cards: cards})
}

func (s *Server) handleGetCard(w http.ResponseWriter, r *http.Request, _ caller) error {
	id, err := pathName(r, "id", "card id")
	if err != nil {
		return err
	}
	card, err := s.lease.GetCard(r.Context(), board.GetCardParams{ID: id})
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
	run, err := s.lease.GetRun(r.Context(), board.GetRunParams{ID: id})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, run)
}

func (s *Server) handleMoveCard(w http.ResponseWriter, r *http.Request, c caller) error {
	return s.operatorMove(w, r, c, s.lease.Move)
}

func (s *Server) handleReopenCard(w http.ResponseWriter, r *http.Request, c caller) error {
	return s.operatorMove(w, r, c, s.lease.Reopen)
}

// operatorMove is a person's move of one card (a plain move or a reopen),
// answered with the card as it is now.
func (s *Server) operatorMove(w http.ResponseWriter, r *http.Request, c caller, move func(ctx context.Context, actor, card, to string, reason board.Reason) (board.Card, error)) error {
	id, err := pathName(r, "id", "card id")
	if err != nil {
		return err
	}
	var req apitype.MoveRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	card, err := move(r.Context(), c.actor, id, req.To, req.Reason)
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
	card, err := s.lease.AdjustLabels(r.Context(), c.actor, id, req.Add, req.Remove)
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
	card, err := s.lease.SetLabels(r.Context(), c.actor, id, req.Labels)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, card)
}

// handleForceRelease is the operator's steal (lease.Service.ForceRelease);
// the released holder's worker is told on the watch stream.
func (s *Server) handleForceRelease(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := pathName(r, "id", "card id")
	if err != nil {
		return err
	}
	tok, err := s.lease.ForceRelease(r.Context(), c.actor, id)
	if err != nil {
		return err
	}
	resp := apitype.ForceReleaseResponse{Card: id}
	if !tok.IsZero() {
		s.Notify(apitype.Frame{
			Type: apitype.FrameClaimLost, Card: id, Epoch: tok.Epoch, Marker: tok.Marker,
			Reason: apitype.LostForceReleased,
		})
		resp.Holder, resp.Epoch = tok.Marker, tok.Epoch
	}
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
		st.Claims = s.lease.HeldClaims()
	}
	st.Draining = st.Draining || s.lease.Draining()
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

// handleEventsHead answers the log's head, the position a waiter follows
// the log from (DESIGN.md#waiting).
func (s *Server) handleEventsHead(w http.ResponseWriter, r *http.Request, _ caller) error {
	seq, err := s.lease.EventsHead(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, apitype.EventsHeadResponse{Seq: seq})
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
		return fmt.Errorf("%w: query parameters after=%d limit=%d: want after >= 0 and limit 1..%d", apitype.ErrBadRequest, after, limit, maxListLimit)
	}
	follow, err := queryBool(r, "follow")
	if err != nil {
		return err
	}
	ctx := r.Context()
	if !follow {
		evs, err := s.lease.Events(ctx, board.EventsParams{After: after, Limit: int(limit)})
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, apitype.EventsResponse{Events: evs})
	}

	// Follow: NDJSON, one event per line, for as long as the caller reads.
	// Writes this server makes wake the loop at once; writes by other
	// agents on a shared store are found by the poll.
	first, err := s.lease.Events(ctx, board.EventsParams{After: after, Limit: eventsPage})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
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
		if evs, err = s.lease.Events(ctx, board.EventsParams{After: after, Limit: eventsPage}); err != nil {
			// The status line is gone; end the stream and let the client
			// resume from the last sequence it saw.
			s.cfg.Logger.Warn("events follow: reading the store", "err", err)
			return nil
		}
	}
}
