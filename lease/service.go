// Package lease is the agent's lease service: everything between a worker's
// request and the store. It grants claims and starts their runs, hands the
// granted claim to the heartbeat tracker (and takes the grant back when the
// tracker refuses it), checks that an owner write comes from the very
// process the claim was granted to, and finishes a card's life in the
// store's fenced lifecycle verbs. The socket layer decodes a request, makes
// one call here and encodes the answer; it never talks to the store.
//
// The store's compare-and-set on (claim, epoch) is the fence (DESIGN.md#fence).
// This package adds what the store cannot know: the process behind a marker
// (a pid the kernel recycled owns nothing) and the claims the agent itself
// stopped vouching for (a claim reported lost is never handed back).
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// Tracker is what the service needs from the heartbeat loop, and
// *heartbeat.Loop satisfies it as is: it learns of granted claims (with the
// clock reading taken just before the store call that granted them, so the
// trusted deadline is counted from the attempt, not the answer), forgets
// released ones, receives keepalive pings and reports what it holds. The
// loop drops a claim it declared lost from Held and Lookup, and the service
// refuses owner writes on a claim the loop no longer holds for the caller;
// the loop remembers such a claim (Disowned) until the card is tracked again,
// so a re-claim by the same worker is a fresh acquisition.
//
// Lookup is the per-request check: every claim and owner write asks about
// one card, and must not pay for copying every claim the agent holds (Held
// is for the listings: status, the watch stream's pings, keepalive).
//
// The owner handed to Add names the calling process: PID from the kernel
// and Start, its exact identity, from the pid prober (both zero for a
// self-declared keepalive identity), and KeepaliveID = the worker's marker,
// which is also the key the worker's pings arrive under.
type Tracker interface {
	Add(hold board.Hold, owner heartbeat.Owner, attemptStart time.Time, lease time.Duration) error
	// RemoveHold stops renewing card if, and only if, its tracked claim is
	// exactly tok.
	RemoveHold(card string, tok board.ClaimToken) bool
	// BeginClose tells the tracker the holder's own call is ending the
	// claim tok on card, until end runs: a renewal that finds the card
	// free meanwhile is that call's write, not a lost claim.
	// end reports whether the call landed.
	BeginClose(card string, tok board.ClaimToken) (end func(landed bool))
	Ping(key string) bool
	Lookup(card string) (heartbeat.Claim, bool)
	Held() []heartbeat.Claim
	// Disowned names the claim on card the loop stopped vouching for while
	// the store may still name it (declared lost, or judged over at boot):
	// the claim path never hands that token back.
	Disowned(card string) (heartbeat.Lost, bool)
}

// Worker is the calling process: its marker (board.WorkerMarker of the
// host and the kernel's pid, or a self-declared keepalive marker) and its
// identity.
type Worker struct {
	Marker string
	Owner  heartbeat.Owner
}

// Store is the part of the store contract the lease service calls: every
// verb a worker's or an operator's request reaches, and of the watchdog's
// role (board.Recovery) only the store's clock; the listings and the
// transfers are the reaper's alone.
type Store interface {
	board.CardReader
	board.CardWriter
	board.Claimer
	board.OwnerWriter
	board.Lifecycle
	board.Runs
	board.EventLog
	board.Retention
	board.BoardAdmin
	Now(ctx context.Context) (time.Time, error)
}

// Config configures a Service. Functions are read on every use so the agent
// can hot-reload them.
type Config struct {
	Store  Store
	Claims Tracker
	// Clock must be the heartbeat loop's clock: trusted time is
	// TrustedUntil − Clock.Now(). Default board.SystemClock.
	Clock board.Clock
	// Lease is the claim lease the agent stamps and renews.
	Lease  func() time.Duration
	Logger *slog.Logger
	// HeadHint, when set, is a position no later than the event log's
	// head (the agent's effects layer's cursor): EventsHead starts its
	// seek there rather than at the log's start.
	HeadHint func() int64
	// CleanupTimeout bounds a compensating write made after the request
	// that caused it ended (default 5s). Such a write never runs on the
	// request's context: a cancelled request must not leave its cleanup
	// undone.
	CleanupTimeout time.Duration
	// RetentionAge is the age an operator's prune uses when it names none
	// (the agent's retention.age; 0: it must name one).
	RetentionAge time.Duration
	// KeepEventsFrom, when set, is the first event seq a prune must keep:
	// the agent's effects layer has not applied it yet (DESIGN.md#retention).
	KeepEventsFrom func() int64
}

// Service is the lease service. It is safe for concurrent use.
type Service struct {
	cfg      Config
	draining atomic.Bool
	// head is the highest event sequence EventsHead has seen: the next
	// seek starts there, so it reads only what was written since.
	head atomic.Int64
}

// New builds a service from cfg.
func New(cfg Config) (*Service, error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("field Store is nil"))
	}
	if cfg.Claims == nil {
		errs = append(errs, errors.New("field Claims is nil"))
	}
	if cfg.Lease == nil {
		errs = append(errs, errors.New("field Lease is nil"))
	} else if cfg.Lease() <= 0 {
		errs = append(errs, fmt.Errorf("field Lease is %v, want > 0", cfg.Lease()))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("lease config: %w", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = board.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CleanupTimeout <= 0 {
		cfg.CleanupTimeout = 5 * time.Second
	}
	return &Service{cfg: cfg}, nil
}

// Lease is the lease the service grants now.
func (s *Service) Lease() time.Duration { return s.cfg.Lease() }

// StopGranting makes every later Claim and Start fail with ErrUnavailable
// (the agent is shutting down); owner writes, Finish and releases go on.
func (s *Service) StopGranting() { s.draining.Store(true) }

// Draining reports whether StopGranting was called.
func (s *Service) Draining() bool { return s.draining.Load() }

var errShuttingDown = fmt.Errorf("%w: agent shutting down: not granting new claims", apitype.ErrUnavailable)

var errPIDReused = fmt.Errorf("%w: this claim was granted to an earlier process with the same pid (its identity, the kernel's start time, differs); a reused pid owns nothing", apitype.ErrForbidden)

// cleanup is the context of a compensating write: it outlives the request
// (whose context may already be cancelled) but not for ever.
func (s *Service) cleanup(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CleanupTimeout)
}

// Grant is a claim the agent granted and tracks.
type Grant struct {
	Card  board.Card
	Token board.ClaimToken
	Lease time.Duration
	// Trusted is how long, from the moment the grant was answered, the
	// agent still trusts the lease.
	Trusted time.Duration
}

// held returns the tracker's entry for card, if any: one map lookup.
func (s *Service) held(card string) (heartbeat.Claim, bool) { return s.cfg.Claims.Lookup(card) }

// remaining is how long the agent still trusts a held claim, from now.
func remaining(h heartbeat.Claim, now time.Time) time.Duration {
	return max(h.TrustedUntil.Sub(now), 0)
}

// SameProcess reports whether the recorded owner of a tracked claim is the
// calling process: same marker and the same identity. A pid the kernel
// recycled for a new process carries another identity, and a reused pid
// owns nothing. Both identities were read by this agent from the kernel
// (exact start ticks), so they are compared exactly (pidprobe.Compare).
func SameProcess(h heartbeat.Claim, w Worker) bool {
	if h.Hold.Token.Marker != w.Marker {
		return false
	}
	a, b := h.Owner.Start, w.Owner.Start
	if !a.Known() || !b.Known() {
		// Self-declared identities carry no start; a kernel one always
		// does. Equal only when both lack it.
		return a.Known() == b.Known()
	}
	return pidprobe.Compare(a, b) == pidprobe.MatchSame
}

// ownedToken admits an owner write only for a claim the agent holds for this
// very process, and builds the token from the caller's own marker: the
// request carries the epoch only, so a worker cannot even name another's
// claim. The store's compare-and-set on (claim, epoch) still decides.
func (s *Service) ownedToken(ctx context.Context, w Worker, card string, epoch int64) (board.ClaimToken, error) {
	if err := board.ValidateName("card id", card); err != nil {
		return board.ClaimToken{}, err
	}
	if epoch <= 0 {
		return board.ClaimToken{}, board.Invalid("epoch must be > 0, got %d", epoch)
	}
	if h, ok := s.held(card); ok && h.Hold.Token.Marker == w.Marker {
		if !SameProcess(h, w) {
			return board.ClaimToken{}, errPIDReused
		}
		return board.ClaimToken{Marker: w.Marker, Epoch: epoch}, nil
	}
	c, err := s.cfg.Store.GetCard(ctx, board.GetCardParams{ID: card})
	if err != nil {
		return board.ClaimToken{}, err
	}
	if c.Claim != "" && c.Claim != w.Marker && epoch == c.ClaimEpoch {
		// The caller names the live claim of another process: not a stale
		// holder (whose epoch is older) but a write on someone else's claim.
		return board.ClaimToken{}, fmt.Errorf("%w: card %q is held by %s, not by this process", apitype.ErrForbidden, card, c.Claim)
	}
	// Everything else is a stale token: a holder that was superseded, released
	// by an operator (the card is free), or whose claim the agent declared
	// lost (the store may still name this marker on an expired lease nobody
	// has reclaimed yet). The fence answers it as the store would, with the
	// current holder, so the late writer learns it must stop.
	return board.ClaimToken{}, fmt.Errorf("the agent holds no claim on card %q for this process: %w",
		card, board.Conflict(card, c.Claim, c.ClaimEpoch))
}

// Claim claims what r names for w (one card, or with Next the oldest
// unclaimed card in a pool state carrying every one of r.Labels), and
// tracks it.
func (s *Service) Claim(ctx context.Context, w Worker, r apitype.ClaimRequest) (Grant, error) {
	if s.draining.Load() {
		return Grant{}, errShuttingDown
	}
	card, next := r.Card, r.Next
	if (card == "") == !next {
		return Grant{}, board.Invalid("give exactly one of card or next")
	}
	if len(r.Labels) > 0 && !next {
		return Grant{}, board.Invalid("labels route a claim of the next card; card %q is named", card)
	}
	lease := s.cfg.Lease()
	if next {
		// ClaimNext only takes a free card: always a fresh acquisition.
		attempt := s.cfg.Clock.Now()
		c, err := s.cfg.Store.ClaimNext(ctx, board.ClaimNextParams{Marker: w.Marker, Lease: lease, Labels: r.Labels})
		if err != nil {
			return Grant{}, err
		}
		return s.trackGrant(ctx, w, c, attempt, lease)
	}
	g, err := s.claimCard(ctx, w, card, lease)
	if errors.Is(err, heartbeat.ErrDisownedToken) {
		// The store's Claim hands the same marker its own token back, and
		// a heartbeat tick gave that token up between beforeClaim and the
		// store's answer: the heartbeat refused it and track handed it
		// back. The second attempt, which beforeClaim now prepares, is a
		// fresh acquisition (DESIGN.md#keepalive).
		g, err = s.claimCard(ctx, w, card, lease)
	}
	return g, err
}

// claimCard claims the named card for w once and tracks it.
func (s *Service) claimCard(ctx context.Context, w Worker, card string, lease time.Duration) (Grant, error) {
	attempt := s.cfg.Clock.Now()
	if err := s.beforeClaim(ctx, w, card); err != nil {
		return Grant{}, err
	}
	c, err := s.cfg.Store.Claim(ctx, board.ClaimParams{Card: card, Marker: w.Marker, Lease: lease})
	if err != nil {
		return Grant{}, err
	}
	return s.trackGrant(ctx, w, c, attempt, lease)
}

// trackGrant hands a claim just taken to the heartbeat and answers its
// grant; a claim the heartbeat refuses is released again.
func (s *Service) trackGrant(ctx context.Context, w Worker, c board.Card, attempt time.Time, lease time.Duration) (Grant, error) {
	tok := c.Token()
	if err := s.track(ctx, w, c.ID, tok, attempt, lease, func(ctx context.Context) error {
		return s.cfg.Store.ReleaseOwned(ctx, board.OwnedParams{Card: c.ID, Token: tok})
	}); err != nil {
		return Grant{}, err
	}
	return s.grant(c, tok, lease), nil
}

// beforeClaim prepares a claim on one card. The store's Claim is idempotent
// for one marker — the same epoch back, lease refreshed — which is right for
// a claim the agent still vouches for, and wrong for one the agent itself
// gave up on: a claim it reported lost to this worker, or that the boot
// sweep judged over. Its holder has stopped, by contract, and handing it the
// same token again would make its next hold indistinguishable, to the
// fence, from the one it abandoned. So such a token is released first
// (fenced on that exact token: a claim that moved on meanwhile is a
// conflict, and left alone), and the claim that follows is a fresh
// acquisition with a higher epoch.
//
// The disowned token may have been an earlier process's with the same pid.
// It is re-acquired afresh all the same: its holder has stopped either way,
// and the new epoch keeps the earlier process's writes from passing the
// fence as the caller's.
func (s *Service) beforeClaim(ctx context.Context, w Worker, card string) error {
	if err := board.ValidateName("card id", card); err != nil {
		return err
	}
	if h, ok := s.held(card); ok && h.Hold.Token.Marker == w.Marker && !SameProcess(h, w) {
		return errPIDReused
	}
	if d, ok := s.cfg.Claims.Disowned(card); ok && d.Marker == w.Marker {
		old := board.ClaimToken{Marker: d.Marker, Epoch: d.Epoch}
		if err := s.cfg.Store.ReleaseOwned(ctx, board.OwnedParams{Card: card, Token: old}); err != nil && !errors.Is(err, board.ErrClaimConflict) {
			return fmt.Errorf("releasing the claim this agent gave up on card %q (epoch %d) before claiming it afresh: %w", card, d.Epoch, err)
		}
	}
	return nil
}

// track hands a granted claim to the heartbeat. When the tracker refuses it
// nobody would renew it, so the grant is taken back at once by undo, on a
// context of its own (the request's may be cancelled by then).
func (s *Service) track(ctx context.Context, w Worker, card string, tok board.ClaimToken, attempt time.Time, lease time.Duration, undo func(context.Context) error) error {
	err := s.cfg.Claims.Add(board.Hold{Card: card, Token: tok}, w.Owner, attempt, lease)
	if err == nil {
		return nil
	}
	cctx, cancel := s.cleanup(ctx)
	defer cancel()
	if uerr := undo(cctx); uerr != nil {
		s.cfg.Logger.Warn("taking back a claim the heartbeat refused", "card", card, "epoch", tok.Epoch, "err", uerr)
	}
	return fmt.Errorf("tracking claim on %q: %w", card, err)
}

func (s *Service) grant(c board.Card, tok board.ClaimToken, lease time.Duration) Grant {
	g := Grant{Card: c, Token: tok, Lease: lease}
	if h, ok := s.held(c.ID); ok && h.Hold.Token == tok {
		g.Trusted = remaining(h, s.cfg.Clock.Now())
	}
	return g
}

// Started is a granted claim with its run.
type Started struct {
	Grant
	Run     board.Run
	Resumed bool
}

// FailureNotTracked is the failure code of a run whose claim the heartbeat
// refused to track right after the grant: the card is handed back at once.
const FailureNotTracked = "CLAIM_NOT_TRACKED"

// Start claims a card and starts its run in the store's one lifecycle write
// (board.Store.Start), then tracks the claim (DESIGN.md#lifecycle).
func (s *Service) Start(ctx context.Context, w Worker, r apitype.StartRequest) (Started, error) {
	if s.draining.Load() {
		return Started{}, errShuttingDown
	}
	if (r.Card == "") == !r.Next {
		return Started{}, board.Invalid("give exactly one of card or next")
	}
	if r.Card != "" {
		if err := s.beforeClaim(ctx, w, r.Card); err != nil {
			return Started{}, err
		}
	}
	if r.RunID == "" {
		r.RunID = NewRunID()
	}
	if r.Status == "" {
		r.Status = board.RunRunning
	}
	lease := s.cfg.Lease()
	attempt := s.cfg.Clock.Now()
	st, err := s.cfg.Store.Start(ctx, board.StartParams{
		Card: r.Card, Next: r.Next, Labels: r.Labels, Marker: w.Marker, Lease: lease, Fresh: r.Fresh,
		Run: s.runOf(w, board.Run{ID: r.RunID, Status: r.Status, Checkpoint: r.Checkpoint}),
	})
	if err != nil {
		return Started{}, err
	}
	if err := s.track(ctx, w, st.Card.ID, st.Token, attempt, lease, func(ctx context.Context) error {
		// Back to the pool, the run left resumable: nothing was done yet.
		_, err := s.cfg.Store.Finish(ctx, board.FinishParams{
			Card: st.Card.ID, Token: st.Token, RunID: st.Run.ID,
			Status: board.RunFailedResumable, FailureCode: FailureNotTracked,
		})
		return err
	}); err != nil {
		return Started{}, err
	}
	return Started{Grant: s.grant(st.Card, st.Token, lease), Run: st.Run, Resumed: st.Resumed}, nil
}

// runOf fills in the owner's identity of a run w starts.
func (s *Service) runOf(w Worker, r board.Run) board.Run {
	if m, err := board.ParseMarker(w.Marker); err == nil {
		r.Host = m.Host
	}
	r.PID = w.Owner.PID
	r.PIDStart = w.Owner.Start.StartMillis
	r.PIDStartTicks = w.Owner.Start.StartTicks
	r.BootID = w.Owner.Start.BootID
	return r
}

// Finish records the verdict on the claim's run, files the card and
// releases the claim, in the store's one fenced write (board.Store.Finish),
// then stops renewing the claim.
func (s *Service) Finish(ctx context.Context, w Worker, card string, v apitype.FinishRequest) (board.FinishResult, error) {
	if v.FailureCode == board.FailureProcessOrphaned {
		return board.FinishResult{}, board.Invalid("failure code %s is reserved for the watchdog", board.FailureProcessOrphaned)
	}
	tok, err := s.ownedToken(ctx, w, card, v.Epoch)
	if err != nil {
		return board.FinishResult{}, err
	}
	end := s.cfg.Claims.BeginClose(card, tok)
	f, err := s.cfg.Store.Finish(ctx, board.FinishParams{
		Card: card, Token: tok, RunID: v.RunID, Status: v.Status, FailureCode: v.FailureCode, Checkpoint: v.Checkpoint,
		Retryable: v.Retryable,
	})
	end(err == nil)
	if ce, ok := board.AsClaimConflict(err); ok && ce.Holder != tok.Marker {
		// The claim is not ours any more (released by an operator,
		// transferred by the watchdog): stop renewing it either way.
		s.cfg.Claims.RemoveHold(card, tok)
	}
	if err != nil {
		return board.FinishResult{}, err
	}
	s.cfg.Claims.RemoveHold(card, tok)
	return f, nil
}

// Release hands a claim back. Releasing a card an operator already freed is
// a no-op, as in the store; only the caller's own claim stops being renewed.
func (s *Service) Release(ctx context.Context, w Worker, card string, epoch int64) error {
	tok, err := s.ownedToken(ctx, w, card, epoch)
	if ce, ok := board.AsClaimConflict(err); ok {
		switch {
		case ce.Holder == "":
			s.cfg.Claims.RemoveHold(card, board.ClaimToken{Marker: w.Marker, Epoch: epoch})
			return nil
		case ce.Holder == w.Marker && ce.Epoch == epoch && s.disownedFrom(w, card, epoch):
			// The store still names the caller's own claim, which the agent
			// no longer vouches for (declared lost, or disowned at boot). A
			// release only gives the card up, so the holder may still hand
			// it back; the store's compare-and-set on (claim, epoch)
			// decides, as for any release (DESIGN.md#claim-lost).
			tok, err = board.ClaimToken{Marker: w.Marker, Epoch: epoch}, nil
		}
	}
	if err != nil {
		return err
	}
	end := s.cfg.Claims.BeginClose(card, tok)
	err = s.cfg.Store.ReleaseOwned(ctx, board.OwnedParams{Card: card, Token: tok})
	end(err == nil)
	if err != nil {
		return err
	}
	s.cfg.Claims.RemoveHold(card, tok)
	return nil
}

// disownedFrom reports whether the claim (card, epoch) the agent stopped
// vouching for was w's own: the same marker and epoch, and the same
// process by its identity when the agent recorded one. A process that got
// the holder's pid since owns nothing of it (DESIGN.md#pid-identity).
func (s *Service) disownedFrom(w Worker, card string, epoch int64) bool {
	d, ok := s.cfg.Claims.Disowned(card)
	if !ok || d.Marker != w.Marker || d.Epoch != epoch {
		return false
	}
	return SameProcess(heartbeat.Claim{Hold: board.Hold{Card: card, Token: board.ClaimToken{Marker: d.Marker, Epoch: d.Epoch}}, Owner: d.Owner}, w)
}

// workerReasons are the reasons a worker may give a state move. Machine
// reasons silence every effect (DESIGN.md#provenance), so only the machine
// may write them.
var workerReasons = map[board.Reason]bool{
	board.ReasonNone:        true,
	board.ReasonRunFinished: true,
	board.ReasonRunFailed:   true,
}

// SetState moves the card, fenced on the caller's claim.
func (s *Service) SetState(ctx context.Context, w Worker, card string, m apitype.SetStateRequest) (bool, error) {
	if !workerReasons[m.Reason] {
		return false, board.Invalid("reason %q is not allowed from a worker (use empty, run_finished or run_failed)", m.Reason)
	}
	tok, err := s.ownedToken(ctx, w, card, m.Epoch)
	if err != nil {
		return false, err
	}
	moved, err := s.cfg.Store.SetStateOwned(ctx, board.SetStateOwnedParams{Card: card, Token: tok, To: m.To, From: m.From, Reason: m.Reason})
	return moved.Changed, err
}

// SetLastRun points the card at one of its own runs, fenced on the
// caller's claim. A run id that names no run, or a run of another card, is
// refused before anything is written, and so, by the store, is an open run
// another claim started (board.PointFence).
func (s *Service) SetLastRun(ctx context.Context, w Worker, card string, epoch int64, runID string) error {
	tok, err := s.ownedToken(ctx, w, card, epoch)
	if err != nil {
		return err
	}
	if err := board.ValidateName("run id", runID); err != nil {
		return err
	}
	run, err := s.cfg.Store.GetRun(ctx, board.GetRunParams{ID: runID})
	if err != nil {
		return err
	}
	if run.Card != card {
		return board.Invalid("run %q is a run of card %q, not of %q", runID, run.Card, card)
	}
	return s.cfg.Store.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: card, Token: tok, RunID: runID})
}

// SetAwaitingInput sets the card's awaiting_input flag, fenced.
func (s *Service) SetAwaitingInput(ctx context.Context, w Worker, card string, epoch int64, awaiting bool) error {
	tok, err := s.ownedToken(ctx, w, card, epoch)
	if err != nil {
		return err
	}
	return s.cfg.Store.SetAwaitingInputOwned(ctx, board.SetAwaitingInputOwnedParams{Card: card, Token: tok, Awaiting: awaiting})
}

// SetGaveUp sets (nil: clears) the card's gave_up stamp, fenced.
func (s *Service) SetGaveUp(ctx context.Context, w Worker, card string, epoch int64, g *board.GaveUp) error {
	tok, err := s.ownedToken(ctx, w, card, epoch)
	if err != nil {
		return err
	}
	return s.cfg.Store.SetGaveUpOwned(ctx, board.SetGaveUpOwnedParams{Card: card, Token: tok, GaveUp: g})
}

// CreateRun starts a run under the caller's claim and points the card at it,
// in the store's one fenced write (board.Store.CreateRun).
func (s *Service) CreateRun(ctx context.Context, w Worker, card string, spec apitype.StartRunRequest) (board.Run, error) {
	tok, err := s.ownedToken(ctx, w, card, spec.Epoch)
	if err != nil {
		return board.Run{}, err
	}
	if spec.Status == "" {
		spec.Status = board.RunRunning
	}
	if spec.ID == "" {
		spec.ID = NewRunID()
	}
	return s.cfg.Store.CreateRun(ctx, board.CreateRunParams{
		Token: tok,
		Run:   s.runOf(w, board.Run{ID: spec.ID, Card: card, Status: spec.Status, Checkpoint: spec.Checkpoint}),
	})
}

// UpdateRun changes a run the caller started, fenced in the store on the
// claim it was started under (board.Store.UpdateRun).
func (s *Service) UpdateRun(ctx context.Context, w Worker, id string, u board.UpdateRunParams) (board.Run, error) {
	if u.FailureCode != nil && *u.FailureCode == board.FailureProcessOrphaned {
		return board.Run{}, board.Invalid("failure code %s is reserved for the watchdog", board.FailureProcessOrphaned)
	}
	if err := board.ValidateName("run id", id); err != nil {
		return board.Run{}, err
	}
	run, err := s.cfg.Store.GetRun(ctx, board.GetRunParams{ID: id})
	if err != nil {
		return board.Run{}, err
	}
	if run.Owner != w.Marker {
		return board.Run{}, fmt.Errorf("%w: run %q is owned by %s", apitype.ErrForbidden, run.ID, run.Owner)
	}
	// The run names the process that started it; a later process on the
	// same pid (and so the same marker) is not its owner. A run an older
	// agent recorded carries only the inexact pid_start (pidprobe.Compare).
	rec := pidprobe.Identity{BootID: run.BootID, StartTicks: run.PIDStartTicks, StartMillis: run.PIDStart}
	if pidprobe.Compare(rec, w.Owner.Start) == pidprobe.MatchOther {
		return board.Run{}, errPIDReused
	}
	tok, err := s.ownedToken(ctx, w, run.Card, run.Epoch)
	if err != nil {
		return board.Run{}, err
	}
	u.ID, u.Token, u.Actor = run.ID, tok, w.Marker
	return s.cfg.Store.UpdateRun(ctx, u)
}

// Keepalive records a keepalive ping from w and lists the claims the agent
// holds for it.
func (s *Service) Keepalive(w Worker) []apitype.TrustedClaim {
	s.cfg.Claims.Ping(w.Marker)
	return s.TrustedFor(w, s.cfg.Clock.Now())
}

// TrustedFor lists the claims the agent holds for this worker process, with
// how long each is still trusted from now: one reading for all of them, so
// the instant a listing is measured at is one the caller can name.
func (s *Service) TrustedFor(w Worker, now time.Time) []apitype.TrustedClaim {
	out := []apitype.TrustedClaim{}
	for _, h := range s.cfg.Claims.Held() {
		if SameProcess(h, w) {
			out = append(out, apitype.TrustedClaim{
				Card: h.Hold.Card, Epoch: h.Hold.Token.Epoch, TrustedMS: remaining(h, now).Milliseconds(),
			})
		}
	}
	return out
}

// NewRunID mints a run id.
func NewRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "run-" + hex.EncodeToString(b[:])
}

// HeldClaims lists every claim the agent holds, with how long each is
// still trusted from now.
func (s *Service) HeldClaims() []apitype.HeldClaim {
	now := s.cfg.Clock.Now()
	out := []apitype.HeldClaim{}
	for _, h := range s.cfg.Claims.Held() {
		out = append(out, apitype.HeldClaim{
			Card: h.Hold.Card, Marker: h.Hold.Token.Marker, Epoch: h.Hold.Token.Epoch,
			PID: h.Owner.PID, TrustedMS: remaining(h, now).Milliseconds(),
		})
	}
	return out
}
