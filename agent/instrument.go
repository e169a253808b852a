package agent

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
// TestStoreWrappersImplementEveryVerb fails on one).
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

// done counts err against op and, for a write, records its outcome for
// the health check.
func (s meteredStore) done(op string, err error) {
	if isStoreError(err) {
		s.m.storeErrors.WithLabelValues(op).Inc()
	}
	if !readOps[op] && !errors.Is(err, context.Canceled) {
		w := WriteOutcome{At: time.Now(), Op: op, OK: !isStoreError(err)}
		if !w.OK {
			w.Err = err.Error()
		}
		s.m.lastWrite.Store(&w)
	}
}

// readOps are the verbs that write nothing; renew_claims is counted with
// them because the heartbeat's own health is the loop's tick, and a store
// that still confirms renewals while refusing every other write (a full
// disk) must still be reported unhealthy.
var readOps = map[string]bool{
	"get_card": true, "list_cards": true, "dependents": true, "get_run": true,
	"events": true, "now": true, "list_expired_claim_candidates": true,
	"list_unleased_running_claims": true, "renew_claims": true, "load_board": true,
}

// storeOps are the op labels of leasekeeper_store_errors_total: every verb
// meteredStore counts, so each series exists at 0 from the start.
var storeOps = []string{
	"adjust_labels", "claim", "claim_next", "create_card", "create_run",
	"delete_card", "dependents", "events", "expire_claim_owned", "finish", "get_card", "get_run",
	"list_cards", "list_expired_claim_candidates", "list_unleased_running_claims",
	"load_board", "now", "prune", "reclaim_expired", "release", "release_expired", "release_owned",
	"renew_claims", "reopen", "set_awaiting_input_owned", "set_board", "set_gave_up_owned",
	"set_labels", "set_labels_from", "set_last_run_owned", "set_state", "set_state_from",
	"set_state_owned", "start", "update_run",
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

func (s meteredStore) CreateCard(ctx context.Context, c board.NewCard) (board.Card, error) {
	out, err := s.inner.CreateCard(ctx, c)
	s.done("create_card", err)
	return out, err
}

func (s meteredStore) GetCard(ctx context.Context, id string) (board.Card, error) {
	out, err := s.inner.GetCard(ctx, id)
	s.done("get_card", err)
	return out, err
}

func (s meteredStore) ListCards(ctx context.Context, f board.CardFilter) ([]board.Card, error) {
	out, err := s.inner.ListCards(ctx, f)
	s.done("list_cards", err)
	return out, err
}

func (s meteredStore) Dependents(ctx context.Context, id string) ([]board.Card, error) {
	out, err := s.inner.Dependents(ctx, id)
	s.done("dependents", err)
	return out, err
}

func (s meteredStore) Claim(ctx context.Context, r board.ClaimRequest) (board.Card, board.ClaimToken, error) {
	c, tok, err := s.inner.Claim(ctx, r)
	s.acquired("claim", err)
	if err == nil {
		s.m.claims.note(board.Hold{Card: c.ID, Token: tok}, c.ClaimedAt)
	}
	return c, tok, err
}

func (s meteredStore) Start(ctx context.Context, r board.StartRequest) (board.Started, error) {
	out, err := s.inner.Start(ctx, r)
	s.acquired("start", err)
	if err == nil {
		s.m.claims.note(board.Hold{Card: out.Card.ID, Token: out.Token}, out.Card.ClaimedAt)
	}
	return out, err
}

func (s meteredStore) Finish(ctx context.Context, r board.FinishRequest) (board.Finished, error) {
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

func (s meteredStore) LoadBoard(ctx context.Context) (board.Board, error) {
	out, err := s.inner.LoadBoard(ctx)
	s.done("load_board", err)
	return out, err
}

func (s meteredStore) SetBoard(ctx context.Context, expect, next board.Board) (board.Board, bool, error) {
	out, changed, err := s.inner.SetBoard(ctx, expect, next)
	s.done("set_board", err)
	if err == nil {
		// The stored board, written or found on a miss: either way the
		// freshest there is.
		s.boards.written(out)
	}
	return out, changed, err
}

func (s meteredStore) SetLabelsFrom(ctx context.Context, l board.LabelsFrom) (board.Card, bool, error) {
	out, changed, err := s.inner.SetLabelsFrom(ctx, l)
	s.done("set_labels_from", err)
	return out, changed, err
}

func (s meteredStore) Close() error { return s.inner.Close() }

func (s meteredStore) ClaimNext(ctx context.Context, r board.ClaimNextRequest) (board.Card, board.ClaimToken, error) {
	c, tok, err := s.inner.ClaimNext(ctx, r)
	s.acquired("claim_next", err)
	if err == nil {
		s.m.claims.note(board.Hold{Card: c.ID, Token: tok}, c.ClaimedAt)
	}
	return c, tok, err
}

// RenewClaims counts the batch error and the per-hold store failures. A
// per-hold conflict is not counted here: the heartbeat reports it as a
// lost claim (superseded or released), which is what it means.
func (s meteredStore) RenewClaims(ctx context.Context, holds []board.Hold, lease time.Duration) ([]board.RenewResult, error) {
	out, err := s.inner.RenewClaims(ctx, holds, lease)
	s.done("renew_claims", err)
	for _, r := range out {
		s.done("renew_claims", r.Err)
	}
	return out, err
}

func (s meteredStore) SetStateOwned(ctx context.Context, m board.OwnedMove) (bool, error) {
	changed, err := s.inner.SetStateOwned(ctx, m)
	s.owned("set_state_owned", err)
	return changed, err
}

func (s meteredStore) SetLastRunOwned(ctx context.Context, card string, tok board.ClaimToken, runID string) error {
	err := s.inner.SetLastRunOwned(ctx, card, tok, runID)
	s.owned("set_last_run_owned", err)
	return err
}

func (s meteredStore) SetAwaitingInputOwned(ctx context.Context, card string, tok board.ClaimToken, awaiting bool) error {
	err := s.inner.SetAwaitingInputOwned(ctx, card, tok, awaiting)
	s.owned("set_awaiting_input_owned", err)
	return err
}

func (s meteredStore) SetGaveUpOwned(ctx context.Context, card string, tok board.ClaimToken, g *board.GaveUp) error {
	err := s.inner.SetGaveUpOwned(ctx, card, tok, g)
	s.owned("set_gave_up_owned", err)
	return err
}

func (s meteredStore) ExpireClaimOwned(ctx context.Context, card string, tok board.ClaimToken) error {
	err := s.inner.ExpireClaimOwned(ctx, card, tok)
	s.owned("expire_claim_owned", err)
	return err
}

func (s meteredStore) ReleaseOwned(ctx context.Context, card string, tok board.ClaimToken) error {
	err := s.inner.ReleaseOwned(ctx, card, tok)
	s.owned("release_owned", err)
	return err
}

func (s meteredStore) ReleaseExpired(ctx context.Context, r board.ExpiredRelease) error {
	err := s.inner.ReleaseExpired(ctx, r)
	s.done("release_expired", err)
	return err
}

func (s meteredStore) Release(ctx context.Context, card, marker, actor string) error {
	err := s.inner.Release(ctx, card, marker, actor)
	s.done("release", err)
	return err
}

func (s meteredStore) SetState(ctx context.Context, m board.Move) error {
	err := s.inner.SetState(ctx, m)
	s.done("set_state", err)
	return err
}

func (s meteredStore) SetStateFrom(ctx context.Context, m board.Move) (bool, error) {
	changed, err := s.inner.SetStateFrom(ctx, m)
	s.done("set_state_from", err)
	return changed, err
}

func (s meteredStore) Reopen(ctx context.Context, m board.Move) error {
	err := s.inner.Reopen(ctx, m)
	s.done("reopen", err)
	return err
}

func (s meteredStore) AdjustLabels(ctx context.Context, c board.LabelChange) (board.Card, error) {
	out, err := s.inner.AdjustLabels(ctx, c)
	s.done("adjust_labels", err)
	return out, err
}

func (s meteredStore) SetLabels(ctx context.Context, card string, labels []string, actor string) (board.Card, error) {
	out, err := s.inner.SetLabels(ctx, card, labels, actor)
	s.done("set_labels", err)
	return out, err
}

func (s meteredStore) CreateRun(ctx context.Context, r board.NewRun) (board.Run, error) {
	out, err := s.inner.CreateRun(ctx, r)
	s.done("create_run", err)
	return out, err
}

// UpdateRun observes a run that reaches its verdict by it
// (DESIGN.md#run-verdicts). The store lets an update rewrite a verdict, so
// an update is the run's verdict only if the run was open before it: a
// compare-and-set on an open status (the watchdog's orphan verdict) says
// so; otherwise the run is read first, and only when the update writes a
// verdict.
func (s meteredStore) UpdateRun(ctx context.Context, u board.RunUpdate) (board.Run, error) {
	verdict := u.Status != nil && !u.Status.Open()
	wasOpen := u.IfStatus != nil && u.IfStatus.Open()
	if verdict && u.IfStatus == nil {
		before, err := s.inner.GetRun(ctx, u.ID)
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

func (s meteredStore) GetRun(ctx context.Context, id string) (board.Run, error) {
	out, err := s.inner.GetRun(ctx, id)
	s.done("get_run", err)
	return out, err
}

func (s meteredStore) Now(ctx context.Context) (time.Time, error) {
	out, err := s.inner.Now(ctx)
	s.done("now", err)
	return out, err
}

func (s meteredStore) ListExpiredClaimCandidates(ctx context.Context, q board.ExpiredQuery) (board.ExpiredPage, error) {
	out, err := s.inner.ListExpiredClaimCandidates(ctx, q)
	s.done("list_expired_claim_candidates", err)
	return out, err
}

func (s meteredStore) ListUnleasedRunningClaims(ctx context.Context, cutoff time.Time, limit int) ([]board.Card, error) {
	out, err := s.inner.ListUnleasedRunningClaims(ctx, cutoff, limit)
	s.done("list_unleased_running_claims", err)
	return out, err
}

func (s meteredStore) ReclaimExpired(ctx context.Context, r board.Reclaim) (board.Card, board.ClaimToken, error) {
	c, tok, err := s.inner.ReclaimExpired(ctx, r)
	s.done("reclaim_expired", err)
	return c, tok, err
}

func (s meteredStore) Events(ctx context.Context, after int64, limit int) ([]board.Event, error) {
	out, err := s.inner.Events(ctx, after, limit)
	s.done("events", err)
	return out, err
}

func (s meteredStore) Prune(ctx context.Context, p board.PruneParams) (board.PruneResult, error) {
	out, err := s.inner.Prune(ctx, p)
	s.done("prune", err)
	return out, err
}

func (s meteredStore) DeleteCard(ctx context.Context, p board.DeleteCardParams) (board.DeleteCardResult, error) {
	out, err := s.inner.DeleteCard(ctx, p)
	s.done("delete_card", err)
	return out, err
}
