package board

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// The decisions Start, Finish, the fenced run writes and Release make once
// a store has read the card and its run. They depend only on the board and
// on what was read, so every store makes them here; reading and writing
// atomically is the store's own business.

// Final reports whether s is a final verdict: finished, failed or
// cancelled. Any other status leaves the run open to a resume.
func (s RunStatus) Final() bool {
	return s == RunFinished || s == RunFailed || s == RunCancelled
}

// Open reports whether a run in status s still awaits its verdict from its
// owner (running, queued or paused): the runs Finish accepts.
func (s RunStatus) Open() bool {
	switch s {
	case RunRunning, RunQueued, RunPausedWaitingHuman, RunPausedOperator:
		return true
	}
	return false
}

// Paused reports whether s is a hold on the run: an operator's
// (paused_operator) or one waiting on a person (paused_waiting_human).
func (s RunStatus) Paused() bool {
	return s == RunPausedOperator || s == RunPausedWaitingHuman
}

// Normalize validates a Start request and fills its defaults: an empty run
// status is running. The run's Card, Owner, Epoch and StartedFrom are the
// store's to set; Card is filled from r.Card when it is named.
func (r StartParams) Normalize() (StartParams, error) {
	if r.Next == (r.Card != "") {
		return StartParams{}, Invalid("start: name exactly one of a card and next")
	}
	if r.Card != "" {
		if err := ValidateCardID(r.Card); err != nil {
			return StartParams{}, err
		}
	}
	if err := ValidateMarker(r.Marker); err != nil {
		return StartParams{}, inCard(r.Card, err)
	}
	if len(r.Labels) > 0 && !r.Next {
		return StartParams{}, Invalid("start: labels route a start of the next card; card %q is named", r.Card)
	}
	if err := ValidateRouteLabels(r.Labels); err != nil {
		return StartParams{}, err
	}
	if err := ValidateLease(r.Card, r.Lease); err != nil {
		return StartParams{}, err
	}
	if r.Run.Card != "" && r.Run.Card != r.Card {
		return StartParams{}, Invalid("start: run %q names card %q, the request %q", r.Run.ID, r.Run.Card, r.Card)
	}
	run := r.Run
	run.Card = r.Card
	if run.Card == "" {
		run.Card = "next" // a placeholder for validation only
	}
	run.Owner, run.Epoch, run.StartedFrom = "", 0, ""
	run, err := run.Normalize()
	if err != nil {
		return StartParams{}, err
	}
	if run.Status != RunRunning && run.Status != RunQueued {
		return StartParams{}, Invalid("start: run %q: status %q (want running or queued)", run.ID, run.Status)
	}
	run.Card = r.Card
	r.Run = run
	return r, nil
}

// Validate checks a Finish request: the card, the token, the run id, the
// verdict, the failure code and the checkpoint.
func (r FinishParams) Validate() error {
	if err := ValidateToken(r.Card, r.Token); err != nil {
		return err
	}
	if err := ValidateName("run id", r.RunID); err != nil {
		return inCard(r.Card, err)
	}
	switch r.Status {
	case RunFinished, RunFailed, RunFailedResumable:
	default:
		return Invalid("card %q: finish run %q with status %q (want finished, failed or failed_resumable)", r.Card, r.RunID, r.Status)
	}
	if err := ValidateText("failure code", r.FailureCode); err != nil {
		return inCard(r.Card, err)
	}
	if r.Retryable && r.Status != RunFailed {
		return Invalid("card %q: finish run %q: only a failed verdict is retryable, not %s", r.Card, r.RunID, r.Status)
	}
	if r.Checkpoint != nil {
		if err := ValidateCheckpoint(*r.Checkpoint); err != nil {
			return inCard(r.Card, err)
		}
	}
	return nil
}

// Normalize validates a fenced run start and fills its run's defaults. The
// run's Owner and Epoch become the token's; it has no StartedFrom (it
// moves no card).
func (r CreateRunParams) Normalize() (CreateRunParams, error) {
	if err := ValidateToken(r.Run.Card, r.Token); err != nil {
		return CreateRunParams{}, err
	}
	run := r.Run
	run.Owner, run.Epoch, run.StartedFrom = "", 0, ""
	run, err := run.Normalize()
	if err != nil {
		return CreateRunParams{}, err
	}
	run.Owner, run.Epoch = r.Token.Marker, r.Token.Epoch
	r.Run = run
	return r, nil
}

// RunFence decides whether tok may write run on card c (the fence of
// UpdateRun): c must be claimed by exactly tok, and the run must be that
// claim's — for a worker token, its Owner and Epoch are the token's; for a
// recovery token, it is the card's recorded run and its Epoch is the claim
// the recovery claim judges. The error is ErrClaimConflict.
func RunFence(c Card, run Run, tok ClaimToken) error {
	if c.Token() != tok || run.Card != c.ID {
		return Conflict(c.ID, c.Claim, c.ClaimEpoch)
	}
	if IsRecoveryMarker(tok.Marker) {
		if c.LastRunID != run.ID || run.Epoch != c.RecoveredEpoch {
			return fmt.Errorf("run %q was not started by the claim %s judges (epoch %d): %w",
				run.ID, tok.Marker, c.RecoveredEpoch, Conflict(c.ID, c.Claim, c.ClaimEpoch))
		}
		return nil
	}
	if run.Owner != tok.Marker || run.Epoch != tok.Epoch {
		return fmt.Errorf("run %q belongs to %s epoch %d: %w", run.ID, run.Owner, run.Epoch, Conflict(c.ID, c.Claim, c.ClaimEpoch))
	}
	return nil
}

// PointFence decides whether tok may point its card at run
// (SetLastRunOwned): a run that has no final verdict must be tok's own
// (its Owner and Epoch), so the pointer epoch of an open run is always
// the run's own epoch and RunFence and the watchdog agree on whose it
// is. Taking over another claim's open run is Start's resume. The error
// is ErrInvalidArgument.
func PointFence(card string, run Run, tok ClaimToken) error {
	if run.Status.Final() || (run.Owner == tok.Marker && run.Epoch == tok.Epoch) {
		return nil
	}
	return Invalid("card %q: run %q is %s under %s epoch %d, not this claim's (%s epoch %d): use Start to resume a run",
		card, run.ID, run.Status, run.Owner, run.Epoch, tok.Marker, tok.Epoch)
}

// FinishFence decides whether Finish may record its verdict on run for
// card c: c is claimed by exactly r.Token (ErrClaimConflict), run is the
// card's recorded run started or resumed under r.Token (ErrClaimConflict)
// and still open (ErrTransitionRejected).
func FinishFence(c Card, run Run, r FinishParams) error {
	if c.Token() != r.Token {
		return Conflict(c.ID, c.Claim, c.ClaimEpoch)
	}
	if c.LastRunID != r.RunID || run.ID != r.RunID || run.Owner != r.Token.Marker || run.Epoch != r.Token.Epoch {
		return fmt.Errorf("card %q: run %q is not the run its claim %s epoch %d started: %w",
			c.ID, r.RunID, r.Token.Marker, r.Token.Epoch, Conflict(c.ID, c.Claim, c.ClaimEpoch))
	}
	if !run.Status.Open() {
		return fmt.Errorf("card %q: run %q already has its verdict %s: %w", c.ID, run.ID, run.Status, ErrTransitionRejected)
	}
	return nil
}

// FinishCheck refuses a Finish the board cannot file, before anything is
// read: a failed verdict on a board without the failed state.
func (b Board) FinishCheck(r FinishParams) error {
	if r.Status == RunFailed && !b.Has(StateFailed) {
		return Invalid("card %q: run failed, but this board has no %q state to file it in", r.Card, StateFailed)
	}
	return nil
}

// FinishFiling decides where Finish files a card read in state cur whose
// run was started from column from (Run.StartedFrom) and whose end routes
// as route (Board.RouteRun): the target state and the reason, or to == ""
// when the card is not moved (an operator put it in a terminal state, or,
// for a return to the pool, anywhere but the running column).
//
// A return to the pool (a resumable failure, or a retry) of a run started
// out of a column outside the pool (backlog, say: no worker's to take yet)
// files the card back to that column: returning it to the pool would hand
// it to the next Start of any card, which nobody asked for. Otherwise a
// resumable failure releases the card where it is when the running column
// is a pool state (the local board: the next Start resumes the run), or
// files it to the first pool state when it would strand there (the fleet
// board); a retry, a fresh attempt with nothing to resume, files it to the
// first pool state on either (DESIGN.md#retries).
func (b Board) FinishFiling(cur, from string, route RunRoute) (to string, reason Reason) {
	switch route.Kind {
	case RouteComplete, RouteFail, RouteSpent:
		to, reason = route.To, route.Reason
	case RouteReturn, RouteRetry:
		if route.Kind == RouteRetry {
			reason = route.Reason
		}
		switch {
		case !b.IsRunning(cur):
			return "", ReasonNone
		case b.startedOutsidePool(from):
			to = from
		case route.Kind == RouteReturn && !b.Strands(cur):
			return "", ReasonNone
		default:
			to = b.FirstPool()
		}
	}
	if to == "" || b.IsTerminal(cur) || cur == to {
		return "", ReasonNone
	}
	return to, reason
}

// startedOutsidePool reports whether from, a run's StartedFrom, is a live
// column of the board a card can be filed back to that is neither a pool
// state nor the running column. waiting_deps is not one: only a promotion
// lets a card out of it, and a card filed back there after its blockers
// completed would wait for a promotion that already happened.
func (b Board) startedOutsidePool(from string) bool {
	st, ok := b.State(from)
	return ok && !st.Pool && !st.Running && !st.Terminal && !st.Retiring() && from != StateWaitingDeps
}

// StartRefusal refuses a Start on a card read as c: a card in a terminal
// state (ErrTerminalStateExit), or one claimed by anyone
// (ErrClaimConflict naming the holder).
func (b Board) StartRefusal(c Card) error {
	if b.IsTerminal(c.State) {
		return fmt.Errorf("card %q: start in terminal state %q: %w", c.ID, c.State, ErrTerminalStateExit)
	}
	if c.Claimed() {
		return Conflict(c.ID, c.Claim, c.ClaimEpoch)
	}
	return nil
}

// ClaimBlocked refuses a claim by id — Claim, or Start naming the card —
// of a free card c read in waiting_deps (DESIGN.md#lifecycle-refusals).
// That column is where a card waits for its blockers: its promotion, when
// the last of them completes, or an operator's move lets it out, and
// ClaimNext never takes from it (it is not a pool state). A claim by id
// must not pass it either, or a card would run, and be filed, before the
// work it depends on. Any other working column is the caller's to name:
// naming a card is how a worker takes one outside the pool.
//
// The refusal is decided by c's state alone, which a store reads and
// writes atomically with the claim; the blockers, read with blocker (an
// ErrNotFound is a missing blocker, any other error is returned as is),
// only word it: the error names each blocker not in a completion state, or
// says that none is outstanding (a card an operator parked there). It
// wraps ErrWaitingOnBlockers. nil when c is not in waiting_deps.
func (b Board) ClaimBlocked(c Card, blocker func(id string) (Card, error)) error {
	if c.State != StateWaitingDeps {
		return nil
	}
	var open []string
	for _, id := range c.DependsOn {
		d, err := blocker(id)
		switch {
		case errors.Is(err, ErrNotFound):
			open = append(open, fmt.Sprintf("%q (missing)", id))
		case err != nil:
			return err
		case !b.IsCompletion(d.State):
			open = append(open, fmt.Sprintf("%q (in %s)", id, d.State))
		}
	}
	switch len(open) {
	case 0:
		return fmt.Errorf("card %q is in %s though no blocker is outstanding: move it to a pool state to claim it: %w",
			c.ID, StateWaitingDeps, ErrWaitingOnBlockers)
	case 1:
		return fmt.Errorf("card %q waits in %s on blocker %s: claim it once that completes: %w",
			c.ID, StateWaitingDeps, open[0], ErrWaitingOnBlockers)
	}
	return fmt.Errorf("card %q waits in %s on blockers %s: claim it once they complete: %w",
		c.ID, StateWaitingDeps, strings.Join(open, ", "), ErrWaitingOnBlockers)
}

// StartRunRefusal refuses a Start on card c whose recorded run is rec
// (nil: none): a paused run is a hold someone put on it, and a Start
// neither resumes nor supersedes it (ErrTransitionRejected naming the run
// and its status). Refused before anything is written.
func StartRunRefusal(c Card, rec *Run) error {
	if rec != nil && rec.ID == c.LastRunID && rec.Status.Paused() {
		return fmt.Errorf("card %q: start: its run %q is %s: a paused run is parked, and a Start neither resumes nor supersedes it: %w",
			c.ID, rec.ID, rec.Status, ErrTransitionRejected)
	}
	return nil
}

// StartAnswered reports whether Start r already landed on card c, read at
// now: c is claimed by r.Marker with a lease that has not ended and points
// under that claim's epoch at runID, the run the Start wrote (r.Run.ID, or
// the recorded run it resumed). The retry returns that state again.
func StartAnswered(c Card, r StartParams, runID string, now time.Time) bool {
	return c.Claim == r.Marker && c.ClaimLeaseUntil.After(now) &&
		c.LastRunID == runID && c.LastRunEpoch == c.ClaimEpoch
}

// Resumable reports whether a Start should take over the card's recorded
// run rec instead of creating one: it has no final verdict and is not
// paused (a paused run refuses the Start: StartRunRefusal).
func Resumable(rec Run) bool { return !rec.Status.Final() && !rec.Status.Paused() }

// Resume is the run a Start makes of the recorded run cur: owned by the new
// claim tok, with the new owner's identity, status and StartedFrom from
// in, its ID, checkpoint and continuation kept, its failure code cleared.
func Resume(cur, in Run, tok ClaimToken, now time.Time) Run {
	next := cur
	next.Status = in.Status
	next.FailureCode = ""
	next.Owner, next.Epoch = tok.Marker, tok.Epoch
	next.Host, next.PID, next.PIDStart, next.PIDStartTicks, next.BootID = in.Host, in.PID, in.PIDStart, in.PIDStartTicks, in.BootID
	next.StartedFrom = in.StartedFrom
	next.UpdatedAt = now
	return next
}

// Supersede is the recorded run cur closed by a fresh Start.
func Supersede(cur Run, now time.Time) Run {
	next := cur
	next.Status = RunCancelled
	next.FailureCode = FailureRunSuperseded
	next.UpdatedAt = now
	return next
}

// Strands reports whether a free card in state would sit where nothing
// picks it up: the running column, when it is not itself a pool state
// (the fleet board's). A claim is never left to end there.
func (b Board) Strands(state string) bool { return b.IsRunning(state) && !b.IsPool(state) }

// ReleaseFiling decides where a release files a card read in state cur
// (Release and ReleaseOwned): out of a running column that would strand it
// (Strands) to the first pool state, as a resumable Finish files it, or
// to == "" when the card stays where it is. The move carries no reason:
// it is the hand-back itself, not a verdict.
func (b Board) ReleaseFiling(cur string) (to string) {
	if !b.Strands(cur) {
		return ""
	}
	return b.FirstPool()
}

// DisplacedRun reports whether a fenced run start (CreateRun) closes cur,
// the card's recorded run it displaces: cur has no final verdict, and
// with the pointer moved on nothing would lead to it any more. The closed
// run is cur superseded (Supersede).
func DisplacedRun(cur Run, newID string, now time.Time) (Run, bool) {
	if cur.ID == newID || cur.Status.Final() {
		return cur, false
	}
	return Supersede(cur, now), true
}

// ReleasedRun reports whether a release of card c (read before the
// release; Release or ReleaseOwned) closes run, the card's recorded run:
// it belongs to the released claim and is running or queued. The closed
// run is returned. A recovery claim owns no run, so its release closes
// none.
func ReleasedRun(c Card, run Run, now time.Time) (Run, bool) {
	if run.ID != c.LastRunID || run.Owner != c.Claim || run.Epoch != c.ClaimEpoch {
		return run, false
	}
	if run.Status != RunRunning && run.Status != RunQueued {
		return run, false
	}
	next := run
	next.Status = RunFailedResumable
	next.FailureCode = FailureClaimReleased
	next.UpdatedAt = now
	return next, true
}
