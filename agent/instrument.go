package agent

//go:generate go run ../internal/storegen -layer agent -root ..

import (
	"context"
	"errors"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// meteredStore is the agent's one choke point for store metrics: the
// socket, the heartbeat, the boot sweep and the reaper all write through
// it, so acquisitions, fence rejections and store errors are counted once,
// where the store answers, instead of at every caller.
//
// It names every verb of the contract itself (it does not embed the
// store: an embedded store would let a new verb through uncounted, and
// TestStoreWrappersImplementEveryVerb fails on one). The verbs that need
// nothing but counting are generated (metered_gen.go, internal/storegen);
// those that observe their answer are written here.
//
// The stored board every SetBoard through it leaves is handed to boards,
// the agent's board cache, so a change made through this agent is what
// its components decide by at once.
type meteredStore struct {
	inner  board.Store
	m      *metrics
	boards *boardCache // nil: none to keep current
}

var _ board.Store = meteredStore{}

// isStoreError reports whether err is a failure of the store itself (down,
// outcome unknown, timed out, corrupt) rather than the store's answer to
// the question asked. Domain answers are the contract working as designed;
// counting them as errors would page someone for a worker that lost a race.
// A cancelled context is the caller going away, not the store failing.
func isStoreError(err error) bool {
	switch {
	case err == nil,
		errors.Is(err, board.ErrNotFound),
		errors.Is(err, board.ErrClaimConflict),
		errors.Is(err, board.ErrTransitionRejected),
		errors.Is(err, board.ErrInvalidArgument),
		errors.Is(err, context.Canceled):
		return false
	}
	return true
}

// read counts err against op, a verb that writes nothing (marked
// //storegen:read in board.Store, so the generated wrapper calls read).
func (s meteredStore) read(op string, err error) {
	if isStoreError(err) {
		s.m.storeErrors.WithLabelValues(op).Inc()
	}
}

// done counts err against op, a write, and records its outcome for the
// health check.
func (s meteredStore) done(op string, err error) {
	s.read(op, err)
	// renew_claims is kept out of the record: the heartbeat's own health
	// is the loop's tick, and a store that still confirms renewals while
	// refusing every other write (a full disk) must still be reported
	// unhealthy.
	if op != "renew_claims" && !errors.Is(err, context.Canceled) {
		w := WriteOutcome{At: time.Now(), Op: op, OK: !isStoreError(err)}
		if !w.OK {
			w.Err = err.Error()
		}
		s.m.lastWrite.Store(&w)
	}
}

// WriteOutcome is how the store answered the last write through the agent
// (renewals aside).
type WriteOutcome struct {
	At time.Time
	Op string
	OK bool
	// Err is the store's failure when OK is false (a domain answer such as
	// a claim conflict is the store working: OK).
	Err string
}

// owned counts an owner write: a claim conflict is the fence refusing a
// stale or foreign token.
func (s meteredStore) owned(verb string, err error) {
	if errors.Is(err, board.ErrClaimConflict) {
		s.m.fence.WithLabelValues(verb).Inc()
	}
	s.done(verb, err)
}

func (s meteredStore) acquired(op string, err error) {
	r := acquireGranted
	switch {
	case err == nil:
	case errors.Is(err, board.ErrClaimConflict):
		r = acquireConflict
	case errors.Is(err, board.ErrNotFound):
		r = acquireNotFound
	default:
		r = acquireError
	}
	s.m.acquisitions.WithLabelValues(r).Inc()
	s.done(op, err)
}

func (s meteredStore) Claim(ctx context.Context, p board.ClaimParams) (board.Card, error) {
	c, err := s.inner.Claim(ctx, p)
	s.acquired("claim", err)
	if err == nil {
		s.m.claims.note(board.Hold{Card: c.ID, Token: c.Token()}, c.ClaimedAt)
	}
	return c, err
}

func (s meteredStore) Start(ctx context.Context, r board.StartParams) (board.StartResult, error) {
	out, err := s.inner.Start(ctx, r)
	s.acquired("start", err)
	if err == nil {
		s.m.claims.note(board.Hold{Card: out.Card.ID, Token: out.Token}, out.Card.ClaimedAt)
	}
	return out, err
}

func (s meteredStore) Finish(ctx context.Context, r board.FinishParams) (board.FinishResult, error) {
	out, err := s.inner.Finish(ctx, r)
	s.owned("finish", err)
	if err == nil {
		// Finish refuses a run that has its verdict already
		// (ErrTransitionRejected): a success is the verdict's one write.
		s.m.verdict(out.Run)
		s.m.retried(out)
	}
	return out, err
}

// Traits are the wrapped store's: a declaration, not a store call.
func (s meteredStore) Traits() board.Traits { return s.inner.Traits() }

func (s meteredStore) SetBoard(ctx context.Context, p board.SetBoardParams) (board.SetBoardResult, error) {
	out, err := s.inner.SetBoard(ctx, p)
	s.done("set_board", err)
	if err == nil {
		// The stored board, written or found on a miss: either way the
		// freshest there is.
		s.boards.written(out.Board)
	}
	return out, err
}

func (s meteredStore) Close() error { return s.inner.Close() }

func (s meteredStore) ClaimNext(ctx context.Context, p board.ClaimNextParams) (board.Card, error) {
	c, err := s.inner.ClaimNext(ctx, p)
	s.acquired("claim_next", err)
	if err == nil {
		s.m.claims.note(board.Hold{Card: c.ID, Token: c.Token()}, c.ClaimedAt)
	}
	return c, err
}

// RenewClaims counts the batch error and the per-hold store failures. A
// per-hold conflict is not counted here: the heartbeat reports it as a
// lost claim (superseded or released), which is what it means.
func (s meteredStore) RenewClaims(ctx context.Context, p board.RenewClaimsParams) ([]board.RenewResult, error) {
	out, err := s.inner.RenewClaims(ctx, p)
	s.done("renew_claims", err)
	for _, r := range out {
		s.done("renew_claims", r.Err)
	}
	return out, err
}

// UpdateRun observes a run that reaches its verdict by it
// (DESIGN.md#run-verdicts). The store lets an update rewrite a verdict, so
// an update is the run's verdict only if the run was open before it: a
// compare-and-set on an open status (the watchdog's orphan verdict) says
// so; otherwise the run is read first, and only when the update writes a
// verdict.
func (s meteredStore) UpdateRun(ctx context.Context, u board.UpdateRunParams) (board.Run, error) {
	verdict := u.Status != nil && !u.Status.Open()
	wasOpen := u.IfStatus != nil && u.IfStatus.Open()
	if verdict && u.IfStatus == nil {
		before, err := s.inner.GetRun(ctx, board.GetRunParams{ID: u.ID})
		s.done("get_run", err)
		wasOpen = err == nil && before.Status.Open()
	}
	out, err := s.inner.UpdateRun(ctx, u)
	s.done("update_run", err)
	if err == nil && verdict && wasOpen {
		s.m.verdict(out)
	}
	return out, err
}
