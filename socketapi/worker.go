package socketapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

var errShuttingDown = fmt.Errorf("%w: agent shutting down: not granting new claims", apitype.ErrUnavailable)

func (s *Server) pingInterval() time.Duration { return s.cfg.Lease() / 3 }

// held returns the tracker's entry for card, if any. It is on the path of
// every claim and owner write, so it is one map lookup in the tracker, not
// a scan of every claim the agent holds.
func (s *Server) held(card string) (heartbeat.Claim, bool) {
	return s.cfg.Claims.Lookup(card)
}

// remaining is how long the agent still trusts a held claim, from now (a
// reading of the server's clock).
func (s *Server) remaining(h heartbeat.Claim, now time.Time) time.Duration {
	return max(h.TrustedUntil.Sub(now), 0)
}

// sameProcess reports whether the recorded owner is the calling process:
// same marker and the same identity. A pid the kernel recycled for a new
// process carries another identity, and a reused pid owns nothing. Both
// identities were read by this agent from the kernel (exact start ticks),
// so they are compared exactly (pidprobe.Compare), with no tolerance.
func (s *Server) sameProcess(h heartbeat.Claim, w worker) bool {
	if h.Hold.Token.Marker != w.marker {
		return false
	}
	a, b := h.Owner.Start, w.owner.Start
	if !a.Known() || !b.Known() {
		// Self-declared identities carry no start; a kernel one always
		// does. Equal only when both lack it.
		return a.Known() == b.Known()
	}
	return pidprobe.Compare(a, b) == pidprobe.MatchSame
}

var errPIDReused = fmt.Errorf("%w: this claim was granted to an earlier process with the same pid (its identity, the kernel's start time, differs); a reused pid owns nothing", apitype.ErrForbidden)

// ownedToken admits an owner write only for a claim the agent holds for this
// very process, and builds the token from the caller's own marker: the body
// carries the epoch only, so a worker cannot even name another's claim.
// The store's compare-and-set on (claim, epoch) still decides; this check
// adds what the store cannot know, the process behind the marker.
func (s *Server) ownedToken(ctx context.Context, w worker, card string, epoch int64) (board.ClaimToken, error) {
	if err := board.ValidateName("card id", card); err != nil {
		return board.ClaimToken{}, err
	}
	if epoch <= 0 {
		return board.ClaimToken{}, board.Invalid("epoch must be > 0, got %d", epoch)
	}
	if h, ok := s.held(card); ok && h.Hold.Token.Marker == w.marker {
		if !s.sameProcess(h, w) {
			return board.ClaimToken{}, errPIDReused
		}
		return board.ClaimToken{Marker: w.marker, Epoch: epoch}, nil
	}
	c, err := s.cfg.Store.GetCard(ctx, card)
	if err != nil {
		return board.ClaimToken{}, err
	}
	if c.Claim != "" && c.Claim != w.marker && epoch == c.ClaimEpoch {
		// The caller names the live claim of another process: not a stale
		// holder (whose epoch is older) but a write on someone else's claim.
		return board.ClaimToken{}, fmt.Errorf("%w: card %q is held by %s, not by this process", apitype.ErrForbidden, card, c.Claim)
	}
	// Everything else is a stale token: a holder that was superseded
	// (another process holds a newer epoch), released by an operator (the
	// card is free), or whose claim the agent declared lost (the store may
	// still name this marker on an expired lease nobody has reclaimed yet).
	// The fence answers it as the store would, with the current holder, so
	// the late writer learns it must stop (DESIGN.md#claim-lost).
	return board.ClaimToken{}, fmt.Errorf("the agent holds no claim on card %q for this process: %w",
		card, board.Conflict(card, c.Claim, c.ClaimEpoch))
}

func (s *Server) handleClaim(w http.ResponseWriter, r *http.Request, c caller) error {
	if s.draining.Load() {
		return errShuttingDown
	}
	var req apitype.ClaimRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	if (req.Card == "") == !req.Next {
		return board.Invalid("give exactly one of card or next")
	}
	ctx, wk := r.Context(), c.worker
	lease := s.cfg.Lease()
	attempt := s.cfg.Clock.Now()
	var card board.Card
	var tok board.ClaimToken
	var err error
	if req.Next {
		// ClaimNext only takes a free card: always a fresh acquisition.
		card, tok, err = s.cfg.Store.ClaimNext(ctx, board.ClaimNextRequest{Marker: wk.marker, Lease: lease})
	} else {
		tok, err = s.claimCard(ctx, wk, req.Card, lease)
		if err == nil {
			card, err = s.cfg.Store.GetCard(ctx, req.Card)
		}
	}
	if err != nil {
		return err
	}
	if err := s.cfg.Claims.Add(board.Hold{Card: card.ID, Token: tok}, wk.owner, attempt, lease); err != nil {
		// Nobody would renew it: hand the card straight back.
		if rerr := s.cfg.Store.ReleaseOwned(context.WithoutCancel(ctx), card.ID, tok); rerr != nil {
			s.cfg.Logger.Warn("releasing a claim the heartbeat refused", "card", card.ID, "err", rerr)
		}
		return fmt.Errorf("tracking claim on %q: %w", card.ID, err)
	}
	var trusted time.Duration
	if h, ok := s.held(card.ID); ok && h.Hold.Token == tok {
		trusted = s.remaining(h, s.cfg.Clock.Now())
	}
	return writeJSON(w, http.StatusOK, apitype.ClaimResponse{
		Card:      card,
		Token:     tok,
		LeaseMS:   lease.Milliseconds(),
		TrustedMS: max(trusted, 0).Milliseconds(),
		Liveness:  s.cfg.Liveness(),
		PingMS:    s.pingInterval().Milliseconds(),
	})
}

// claimCard claims one card for the caller. The store's Claim is idempotent
// for one marker — the same epoch back, lease refreshed — which is right
// for a claim the agent still vouches for (a worker re-claiming a card it
// holds), and wrong for one the agent itself gave up on: a claim it reported
// lost to this worker, or that the boot sweep judged over. Its holder has
// stopped, by contract, and handing it the same token again would make its
// next hold indistinguishable, to the fence, from the one it abandoned — and
// the worker's client, told that epoch was lost, would drop the grant at
// once while the heartbeat renewed it for ever. So such a token is released
// first (fenced on that exact token: a claim that moved on meanwhile is a
// conflict, and left alone), and the Claim that follows is a fresh
// acquisition with a higher epoch. A card another worker grabs in between
// is the ordinary conflict of two claimants.
//
// The disowned token may have been an earlier process's with the same pid
// (the loop declared its owner dead). It is re-acquired afresh all the
// same: its holder has stopped either way, and the new epoch is what keeps
// the earlier process's writes from passing the fence as the caller's.
func (s *Server) claimCard(ctx context.Context, wk worker, card string, lease time.Duration) (board.ClaimToken, error) {
	if h, ok := s.held(card); ok && h.Hold.Token.Marker == wk.marker && !s.sameProcess(h, wk) {
		return board.ClaimToken{}, errPIDReused
	}
	if d, ok := s.cfg.Claims.Disowned(card); ok && d.Marker == wk.marker {
		old := board.ClaimToken{Marker: d.Marker, Epoch: d.Epoch}
		if err := s.cfg.Store.ReleaseOwned(ctx, card, old); err != nil && !errors.Is(err, board.ErrClaimConflict) {
			return board.ClaimToken{}, fmt.Errorf("releasing the claim this agent gave up on card %q (epoch %d) before claiming it afresh: %w", card, d.Epoch, err)
		}
	}
	return s.cfg.Store.Claim(ctx, board.ClaimRequest{Card: card, Marker: wk.marker, Lease: lease})
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
	tok, err := s.ownedToken(r.Context(), c.worker, card, epoch)
	if ce, ok := board.AsClaimConflict(err); ok && ce.Holder == "" {
		// Releasing a free card is a no-op by contract (ReleaseOwned on a
		// free card is nil): an operator's force-release got there first.
		// Only the caller's own claim stops being renewed: another worker
		// may have claimed the card since it read free.
		s.cfg.Claims.RemoveHold(card, board.ClaimToken{Marker: c.worker.marker, Epoch: epoch})
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if err != nil {
		return err
	}
	if err := s.cfg.Store.ReleaseOwned(r.Context(), card, tok); err != nil {
		return err
	}
	s.cfg.Claims.RemoveHold(card, tok)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// workerReasons are the reasons a worker may give a state move. Machine
// reasons silence every effect (DESIGN.md#machine-reasons), so only the machine
// may write them.
var workerReasons = map[board.Reason]bool{
	board.ReasonNone:        true,
	board.ReasonRunFinished: true,
	board.ReasonRunFailed:   true,
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
	if !workerReasons[req.Reason] {
		return board.Invalid("reason %q is not allowed from a worker (use empty, run_finished or run_failed)", req.Reason)
	}
	tok, err := s.ownedToken(r.Context(), c.worker, card, req.Epoch)
	if err != nil {
		return err
	}
	changed, err := s.cfg.Store.SetStateOwned(r.Context(), board.OwnedMove{
		Card: card, Token: tok, To: req.To, From: req.From, Reason: req.Reason,
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, apitype.ChangedResponse{Changed: changed})
}

func (s *Server) handleOwnedLastRun(w http.ResponseWriter, r *http.Request, c caller) error {
	return ownedWrite(s, w, r, c, func(ctx context.Context, card string, tok board.ClaimToken, req *apitype.SetLastRunRequest) error {
		return s.cfg.Store.SetLastRunOwned(ctx, card, tok, req.RunID)
	})
}

func (s *Server) handleOwnedAwaitingInput(w http.ResponseWriter, r *http.Request, c caller) error {
	return ownedWrite(s, w, r, c, func(ctx context.Context, card string, tok board.ClaimToken, req *apitype.SetAwaitingInputRequest) error {
		return s.cfg.Store.SetAwaitingInputOwned(ctx, card, tok, req.AwaitingInput)
	})
}

func (s *Server) handleOwnedGaveUp(w http.ResponseWriter, r *http.Request, c caller) error {
	return ownedWrite(s, w, r, c, func(ctx context.Context, card string, tok board.ClaimToken, req *apitype.SetGaveUpRequest) error {
		return s.cfg.Store.SetGaveUpOwned(ctx, card, tok, req.GaveUp)
	})
}

// ownedWrite is the shape every answer-less owner write shares: decode the
// request, resolve the caller's token for the card at the epoch it names
// (the fence), write, answer 204.
func ownedWrite[T any, PT interface {
	*T
	FenceEpoch() int64
}](s *Server, w http.ResponseWriter, r *http.Request, c caller, write func(context.Context, string, board.ClaimToken, PT) error) error {
	card, err := pathName(r, "card", "card id")
	if err != nil {
		return err
	}
	req := PT(new(T))
	if err := s.decode(w, r, req); err != nil {
		return err
	}
	tok, err := s.ownedToken(r.Context(), c.worker, card, req.FenceEpoch())
	if err != nil {
		return err
	}
	if err := write(r.Context(), card, tok, req); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "run-" + hex.EncodeToString(b[:])
}

// failureClaimLost marks a run created for a claim that was lost before the
// card could point at it, so it is not left "running" with no card.
const failureClaimLost = "CLAIM_LOST_AT_START"

func (s *Server) handleStartRun(w http.ResponseWriter, r *http.Request, c caller) error {
	card, err := pathName(r, "card", "card id")
	if err != nil {
		return err
	}
	var req apitype.StartRunRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	ctx, wk := r.Context(), c.worker
	tok, err := s.ownedToken(ctx, wk, card, req.Epoch)
	if err != nil {
		return err
	}
	if req.Status == "" {
		req.Status = board.RunRunning
	}
	if req.ID == "" {
		req.ID = newRunID()
	}
	// Check the fence before creating anything, so a stale holder does not
	// leave a run behind; SetLastRunOwned below is the authoritative CAS.
	cur, err := s.cfg.Store.GetCard(ctx, card)
	if err != nil {
		return err
	}
	if cur.Token() != tok {
		return board.Conflict(card, cur.Claim, cur.ClaimEpoch)
	}
	m, err := board.ParseMarker(wk.marker)
	if err != nil {
		return err
	}
	run, err := s.cfg.Store.CreateRun(ctx, board.Run{
		ID: req.ID, Card: card, Status: req.Status, Checkpoint: req.Checkpoint,
		Owner: tok.Marker, Epoch: tok.Epoch,
		Host: m.Host, PID: wk.owner.PID, PIDStart: wk.owner.Start.StartMillis,
		PIDStartTicks: wk.owner.Start.StartTicks, BootID: wk.owner.Start.BootID,
	})
	if err != nil {
		return err
	}
	if err := s.cfg.Store.SetLastRunOwned(ctx, card, tok, run.ID); err != nil {
		// The claim was lost between the check and the stamp. Close the run
		// so nothing reads it as a live run nobody points at.
		failed, code := board.RunFailed, failureClaimLost
		if _, uerr := s.cfg.Store.UpdateRun(ctx, board.RunUpdate{ID: run.ID, Status: &failed, FailureCode: &code, Actor: tok.Marker}); uerr != nil {
			s.cfg.Logger.Warn("closing a run whose claim was lost at start", "run", run.ID, "err", uerr)
		}
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
	ctx, wk := r.Context(), c.worker
	if req.FailureCode != nil && *req.FailureCode == board.FailureProcessOrphaned {
		return board.Invalid("failure code %s is reserved for the watchdog", board.FailureProcessOrphaned)
	}
	run, err := s.cfg.Store.GetRun(ctx, id)
	if err != nil {
		return err
	}
	if run.Owner != wk.marker {
		return fmt.Errorf("%w: run %q is owned by %s", apitype.ErrForbidden, run.ID, run.Owner)
	}
	// The run names the process that started it; a later process on the
	// same pid (and so the same marker) is not its owner. A run an older
	// agent recorded carries only the inexact pid_start (see
	// pidprobe.Compare).
	rec := pidprobe.Identity{BootID: run.BootID, StartTicks: run.PIDStartTicks, StartMillis: run.PIDStart}
	if pidprobe.Compare(rec, wk.owner.Start) == pidprobe.MatchOther {
		return errPIDReused
	}
	// Only the holder of the claim the run was started under may update it:
	// once the claim moved on (the watchdog transferred it, an operator
	// broke it), the run's fate belongs to the new holder.
	if _, err := s.ownedToken(ctx, wk, run.Card, run.Epoch); err != nil {
		return err
	}
	cur, err := s.cfg.Store.GetCard(ctx, run.Card)
	if err != nil {
		return err
	}
	if cur.Token() != (board.ClaimToken{Marker: run.Owner, Epoch: run.Epoch}) {
		return board.Conflict(run.Card, cur.Claim, cur.ClaimEpoch)
	}
	updated, err := s.cfg.Store.UpdateRun(ctx, board.RunUpdate{
		ID: run.ID, IfStatus: req.IfStatus, Status: req.Status, Continuation: req.Continuation,
		FailureCode: req.FailureCode, Checkpoint: req.Checkpoint, Actor: wk.marker,
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, updated)
}

// trustedAt lists the claims the agent holds for this worker process, with
// how long each is still trusted from now: one reading for all of them, so
// the instant a listing is measured at is one the caller can name.
func (s *Server) trustedAt(wk worker, now time.Time) []apitype.TrustedClaim {
	out := []apitype.TrustedClaim{}
	for _, h := range s.cfg.Claims.Held() {
		if s.sameProcess(h, wk) {
			out = append(out, apitype.TrustedClaim{
				Card: h.Hold.Card, Epoch: h.Hold.Token.Epoch, TrustedMS: s.remaining(h, now).Milliseconds(),
			})
		}
	}
	return out
}

func (s *Server) handleKeepalive(w http.ResponseWriter, r *http.Request, c caller) error {
	if err := s.decode(w, r, &struct{}{}); err != nil {
		return err
	}
	s.cfg.Claims.Ping(c.worker.marker)
	return writeJSON(w, http.StatusOK, apitype.KeepaliveResponse{Claims: s.trustedAt(c.worker, s.cfg.Clock.Now())})
}
