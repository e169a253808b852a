package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
)

// Causes of a Claim's context cancellation; context.Cause(cl.Context())
// wraps one of them with the details.
var (
	// ErrClaimLost: the agent reported the claim lost (an operator broke
	// it, the lease could not be renewed, the owner check failed), or a
	// fenced write was refused because someone else now holds the card.
	ErrClaimLost = errors.New("claim lost")
	// ErrLeaseUntrusted: the time the agent last said it trusted the lease
	// ran out on this process's own clock without a fresher word from the
	// agent: the agent is gone, hung, or no longer renewing this claim.
	ErrLeaseUntrusted = errors.New("claim lease no longer trusted: no word from the agent")
	// ErrReleased: the claim was released through Release.
	ErrReleased = errors.New("claim released")
)

// Claim is a claim this process holds on a card.
type Claim struct {
	c     *Client
	card  board.Card
	token board.ClaimToken
	// run and resumed are what Start started; zero for a plain claim.
	run     board.Run
	resumed bool

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time // monotonic: only ever compared with time.Now()
	timer    *time.Timer
	done     bool
	// moved is signalled, coalesced, whenever deadline changes.
	moved chan struct{}
}

// Context is cancelled when the claim ends: on claim_lost from the agent,
// on Release, and BY ITSELF when the agent has not renewed its trust in the
// lease in time. context.Cause names which.
//
// The last case is load-bearing. The watchdog may declare a run orphaned
// once its owner's lease expired longer ago than the orphan grace, and that
// proof is only sound if every holder stops by its lease deadline on its
// own, even when it can no longer hear the agent (DESIGN.md#client-deadline,
// DESIGN.md#orphan-proof). So the client keeps the deadline the
// agent last vouched for, as a duration added to this process's monotonic
// clock (the two processes' wall clocks never need to agree), and cancels
// there unless a fresher ping moved it. A deadline that has passed is never
// revived by a late frame.
//
// A claim that ends at its trusted deadline, or that the agent reported lost
// as it granted it, is given up: the client also hands the card back, in the
// background (see Client.handBack). The agent may not know the holder has
// stopped — in pid mode it renews a claim for as long as the pid lives — and
// would otherwise keep the card held for a process that no longer thinks it
// holds it.
func (cl *Claim) Context() context.Context { return cl.ctx }

// Run is the run Start started (or resumed) under this claim; the zero Run
// for a claim made with Claim or ClaimNext.
func (cl *Claim) Run() board.Run { return cl.run }

// Resumed reports whether Start took over the card's recorded run instead
// of starting a new one (Run().Checkpoint is where it left off).
func (cl *Claim) Resumed() bool { return cl.resumed }

// Card is the card as it was when the claim was granted.
func (cl *Claim) Card() board.Card { return cl.card }

// Token is the claim's fence.
func (cl *Claim) Token() board.ClaimToken { return cl.token }

// TrustedUntil is the monotonic deadline the client currently holds; the
// Context is cancelled there unless the agent extends it.
func (cl *Claim) TrustedUntil() time.Time {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.deadline
}

// TrustMoved receives a value whenever the agent's word moved TrustedUntil
// (read it after each receive). Values are coalesced: a reader that falls
// behind gets one for several moves, never a stale deadline. It lets a
// process hand the deadline on to one that must keep it even while this
// one cannot run: `leasekeeper claim` gives each to the supervisor of its
// command (DESIGN.md#process-tree).
func (cl *Claim) TrustMoved() <-chan struct{} { return cl.moved }

func (cl *Claim) start(trusted time.Duration, at time.Time) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.deadline = at.Add(trusted)
	cl.timer = time.AfterFunc(time.Until(cl.deadline), cl.expire)
}

// trust records that the agent, at (or before) `at`, still trusted the
// lease for `remaining`. `at` must be no later than the moment the agent
// measured it: the send time of a request, or for a watch frame the instant
// measuredAt derives from the stream's own send time — never the frame's
// receipt, which may come any time later.
func (cl *Claim) trust(remaining time.Duration, at time.Time) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.done {
		return
	}
	if !time.Now().Before(cl.deadline) {
		cl.giveUpLocked(fmt.Errorf("%w (card %s, epoch %d)", ErrLeaseUntrusted, cl.card.ID, cl.token.Epoch))
		return
	}
	cl.deadline = at.Add(remaining)
	cl.timer.Reset(time.Until(cl.deadline))
	select {
	case cl.moved <- struct{}{}:
	default:
	}
}

func (cl *Claim) expire() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.done {
		return
	}
	if left := time.Until(cl.deadline); left > 0 {
		cl.timer.Reset(left)
		return
	}
	cl.giveUpLocked(fmt.Errorf("%w (card %s, epoch %d)", ErrLeaseUntrusted, cl.card.ID, cl.token.Epoch))
}

// end cancels the claim's context with cause and forgets it.
func (cl *Claim) end(cause error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.endLocked(cause)
}

// giveUp ends a claim this process gives up on by itself, and hands the
// card back (endLocked only ends it: for a claim that ended through the
// agent, by a release or a refusal, there is nothing to hand back).
func (cl *Claim) giveUp(cause error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.giveUpLocked(cause)
}

func (cl *Claim) giveUpLocked(cause error) {
	if cl.done {
		return
	}
	// Before the cancel: a worker that sees its context end and claims the
	// card again must find the hand-back under way.
	cl.c.handBack(cl.card.ID, cl.token)
	cl.endLocked(cause)
}

func (cl *Claim) endLocked(cause error) {
	if cl.done {
		return
	}
	cl.done = true
	if cl.timer != nil {
		cl.timer.Stop()
	}
	cl.cancel(cause)
	go cl.c.forget(cl)
}

// Claim claims one card for this process.
func (c *Client) Claim(ctx context.Context, card string) (*Claim, error) {
	return c.claim(ctx, card, "/v1/claims", apitype.ClaimRequest{Card: card})
}

// ClaimNext claims the oldest unclaimed card in a pool state, and with
// labels the oldest that carries every one of them (a worker for GPU cards
// passes "gpu"); board.ErrNotFound when there is none.
func (c *Client) ClaimNext(ctx context.Context, labels ...string) (*Claim, error) {
	return c.claim(ctx, "", "/v1/claims", apitype.ClaimRequest{Next: true, Labels: labels})
}

// StartOptions shape a Start. All fields are optional.
type StartOptions struct {
	// RunID names the run to create; the agent mints one when empty.
	RunID string
	// Status is the new run's status: running (the default) or queued.
	Status     board.RunStatus
	Checkpoint string
	// Fresh starts a new run even when the card records one without a
	// final verdict (which Start otherwise resumes).
	Fresh bool
	// Labels: StartNext takes only a card carrying every one of them.
	Labels []string
	// Wait makes Start wait, while the card is held by another process or
	// waits on its blockers, and StartNext wait, while no card is
	// claimable, until it can start one or ctx ends (then a *WaitError
	// carrying the last refusal). Woken by the agent's event log
	// (DESIGN.md#waiting), as ClaimWait and ClaimNextWait.
	Wait bool
}

// Start claims card and starts its run in one write: the card is claimed,
// its run created (or its recorded unfinished run resumed, see Resumed),
// and the card moved into the running column, all or nothing. A card in a
// terminal state is board.ErrTerminalStateExit; a held card is
// board.ErrClaimConflict; neither mints anything. End it with Finish.
func (c *Client) Start(ctx context.Context, card string, o StartOptions) (*Claim, error) {
	if o.Wait {
		return c.waitClaim(ctx, card, "/v1/starts", o.request(card, false))
	}
	return c.claim(ctx, card, "/v1/starts", o.request(card, false))
}

// StartNext is Start on the oldest unclaimed card in a pool state;
// board.ErrNotFound when there is none.
func (c *Client) StartNext(ctx context.Context, o StartOptions) (*Claim, error) {
	if o.Wait {
		return c.waitClaim(ctx, "", "/v1/starts", o.request("", true))
	}
	return c.claim(ctx, "", "/v1/starts", o.request("", true))
}

func (o StartOptions) request(card string, next bool) apitype.StartRequest {
	return apitype.StartRequest{Card: card, Next: next, Labels: o.Labels, RunID: o.RunID, Status: o.Status, Checkpoint: o.Checkpoint, Fresh: o.Fresh}
}

func (c *Client) claim(ctx context.Context, card, path string, req any) (*Claim, error) {
	c.init()
	if card != "" {
		// A claim on this card given up a moment ago is being handed back:
		// let that finish, so this claim is a fresh one, not the old token.
		if err := c.awaitHandBack(ctx, card); err != nil {
			return nil, err
		}
	}
	// The watch stream is connected before the claim is asked for, so a
	// claim_lost pushed right after the grant cannot fall between the two.
	s, err := c.acquireLink(ctx)
	if err != nil {
		return nil, err
	}
	sent := time.Now()
	var resp apitype.StartResponse // a plain claim's answer is its ClaimResponse
	if err := c.do(ctx, http.MethodPost, path, nil, req, &resp); err != nil {
		c.releaseLink(s)
		return nil, err
	}
	cctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	cl := &Claim{c: c, card: resp.Card, token: resp.Token, run: resp.Run, resumed: resp.Resumed, ctx: cctx, cancel: cancel, moved: make(chan struct{}, 1)}
	cl.start(time.Duration(resp.TrustedMS)*time.Millisecond, sent)
	c.mu.Lock()
	if old := c.claims[resp.Card.ID]; old != nil && old != cl {
		// A re-claim of a card this process already holds: the agent
		// refreshed the same claim; keep one Claim per card.
		c.mu.Unlock()
		old.end(fmt.Errorf("%w: superseded by a new Claim on the same card", ErrReleased))
		c.mu.Lock()
	}
	c.claims[resp.Card.ID] = cl
	lostEpoch, wasLost := c.lost[resp.Card.ID]
	c.mu.Unlock()
	if wasLost && lostEpoch == resp.Token.Epoch {
		// An epoch this client was told is lost, or gave up itself: never
		// resume it. It may be that the agent granted it again (an agent
		// that re-grants a lost token, or that never heard this client give
		// it up), and then only a release stops the agent renewing it.
		cl.giveUp(fmt.Errorf("%w: card %s epoch %d: reported lost as it was granted", ErrClaimLost, resp.Card.ID, lostEpoch))
	}
	return cl, nil
}

// forget drops a finished claim and stops the link when none is left.
func (c *Client) forget(cl *Claim) {
	c.mu.Lock()
	if c.claims[cl.card.ID] == cl {
		delete(c.claims, cl.card.ID)
	} else {
		c.mu.Unlock()
		return
	}
	s := c.link
	c.mu.Unlock()
	if s != nil {
		c.releaseLink(s)
	}
}

// noteLost records a claim_lost frame for claims not registered yet.
func (c *Client) noteLost(card string, epoch int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noteLostLocked(card, epoch)
}

func (c *Client) noteLostLocked(card string, epoch int64) {
	if len(c.lost) >= 1024 {
		clear(c.lost)
	}
	c.lost[card] = epoch
}

// handBackTimeout bounds the release a client sends when it gives a claim
// up by itself.
const handBackTimeout = 5 * time.Second

// handBack releases, in the background, a claim this process gave up on by
// itself, and remembers its epoch as lost so a later grant of the same
// token is refused. It is best effort: the agent may be the reason the
// claim was given up (gone, hung), and then the release fails, bounded by
// handBackTimeout, and the claim is left to the agent's own rules (its
// lease, its loss declarations, its boot sweep). It runs on a context of
// its own, never the claim's (cancelled by then) nor the caller's, and the
// fence makes it harmless when the claim has moved on: a release of a stale
// token is refused, a free card's is a no-op.
func (c *Client) handBack(card string, tok board.ClaimToken) {
	done := make(chan struct{})
	c.mu.Lock()
	c.noteLostLocked(card, tok.Epoch)
	prev := c.handingBack[card]
	c.handingBack[card] = done
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			if c.handingBack[card] == done {
				delete(c.handingBack, card)
			}
			c.mu.Unlock()
			close(done)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), handBackTimeout)
		defer cancel()
		if prev != nil {
			select {
			case <-prev:
			case <-ctx.Done():
				return
			}
		}
		q := url.Values{"epoch": {strconv.FormatInt(tok.Epoch, 10)}}
		_ = c.do(ctx, http.MethodDelete, "/v1/claims/"+url.PathEscape(card), q, nil, nil)
	}()
}

// awaitHandBack waits for a hand-back of card in flight, if any, to end.
func (c *Client) awaitHandBack(ctx context.Context, card string) error {
	c.mu.Lock()
	done := c.handingBack[card]
	c.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) lookup(card string, epoch int64) *Claim {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.claims[card]
	if cl == nil || (epoch != 0 && cl.token.Epoch != epoch) {
		return nil
	}
	return cl
}

func (c *Client) open() []*Claim {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Claim, 0, len(c.claims))
	for _, cl := range c.claims {
		out = append(out, cl)
	}
	return out
}

// bound ties a write to the claim: a write issued while the claim is live
// is cancelled when the claim ends (a claim_lost, or the trusted deadline
// passing while the agent does not answer), so an agent that hangs
// mid-request cannot keep this holder working past its lease — the
// watchdog's orphan proof counts on every holder stopping by then. A write
// issued after the claim already ended is left alone: it reaches the agent
// and the fence refuses it, which is how a late writer learns the truth.
func (cl *Claim) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if cl.ctx.Err() != nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(cl.ctx, func() { cancel(context.Cause(cl.ctx)) })
	return ctx, func() { stop(); cancel(nil) }
}

// owned runs a fenced write on the claim's own card routes.
func (cl *Claim) owned(ctx context.Context, method, path string, q url.Values, body, out any) error {
	return cl.fenced(ctx, method, "/v1/claims/"+url.PathEscape(cl.card.ID)+path, q, body, out)
}

// fenced runs a write the agent fences with this claim; a claim conflict
// means the fence refused this holder, so the claim is over and its
// context is cancelled.
func (cl *Claim) fenced(ctx context.Context, method, path string, q url.Values, body, out any) error {
	ctx, done := cl.bound(ctx)
	defer done()
	err := cl.c.do(ctx, method, path, q, body, out)
	if errors.Is(err, board.ErrClaimConflict) {
		cl.end(fmt.Errorf("%w: %w", ErrClaimLost, err))
	}
	return err
}

// StateOption modifies SetState.
type StateOption func(*apitype.SetStateRequest)

// From makes the move a compare-and-set on the declared source state.
func From(state string) StateOption { return func(r *apitype.SetStateRequest) { r.From = state } }

// WithReason gives the move a reason (empty, run_finished or run_failed).
func WithReason(reason board.Reason) StateOption {
	return func(r *apitype.SetStateRequest) { r.Reason = reason }
}

// SetState moves the card, fenced on this claim. changed is false when a
// From condition did not hold.
func (cl *Claim) SetState(ctx context.Context, to string, opts ...StateOption) (changed bool, err error) {
	req := apitype.SetStateRequest{Fenced: cl.fence(), To: to}
	for _, o := range opts {
		o(&req)
	}
	var resp apitype.ChangedResponse
	err = cl.owned(ctx, http.MethodPut, "/state", nil, req, &resp)
	return resp.Changed, err
}

// SetLastRun stamps the card's last_run_id.
func (cl *Claim) SetLastRun(ctx context.Context, runID string) error {
	return cl.owned(ctx, http.MethodPut, "/last-run", nil, apitype.SetLastRunRequest{Fenced: cl.fence(), RunID: runID}, nil)
}

// SetAwaitingInput sets the card's awaiting_input flag.
func (cl *Claim) SetAwaitingInput(ctx context.Context, awaiting bool) error {
	return cl.owned(ctx, http.MethodPut, "/awaiting-input", nil,
		apitype.SetAwaitingInputRequest{Fenced: cl.fence(), AwaitingInput: awaiting}, nil)
}

// SetGaveUp sets (nil: clears) the card's gave_up stamp.
func (cl *Claim) SetGaveUp(ctx context.Context, g *board.GaveUp) error {
	return cl.owned(ctx, http.MethodPut, "/gave-up", nil, apitype.SetGaveUpRequest{Fenced: cl.fence(), GaveUp: g}, nil)
}

// RunSpec describes a run to start. All fields are optional.
type RunSpec struct {
	ID         string
	Status     board.RunStatus // default running
	Checkpoint string
}

// StartRun records a run owned by this claim and points the card's
// last_run_id at it.
func (cl *Claim) StartRun(ctx context.Context, spec RunSpec) (board.Run, error) {
	var run board.Run
	err := cl.owned(ctx, http.MethodPost, "/runs", nil, apitype.StartRunRequest{
		Fenced: cl.fence(), ID: spec.ID, Status: spec.Status, Checkpoint: spec.Checkpoint,
	}, &run)
	return run, err
}

// UpdateRun changes a run this claim started.
func (cl *Claim) UpdateRun(ctx context.Context, runID string, u apitype.UpdateRunRequest) (board.Run, error) {
	var run board.Run
	err := cl.fenced(ctx, http.MethodPatch, "/v1/runs/"+url.PathEscape(runID), nil, u, &run)
	return run, err
}

// Release hands the card back. The claim's context is cancelled whatever
// the answer: a release refused as a conflict means the claim was already
// gone.
func (cl *Claim) Release(ctx context.Context) error {
	q := url.Values{"epoch": {strconv.FormatInt(cl.token.Epoch, 10)}}
	err := cl.c.do(ctx, http.MethodDelete, "/v1/claims/"+url.PathEscape(cl.card.ID), q, nil, nil)
	switch {
	case err == nil:
		cl.end(ErrReleased)
	case errors.Is(err, board.ErrClaimConflict):
		cl.end(fmt.Errorf("%w: %w", ErrClaimLost, err))
	}
	return err
}

// Verdict is the outcome of the claim's run (Finish).
type Verdict struct {
	// Status is board.RunFinished, board.RunFailed or
	// board.RunFailedResumable.
	Status      board.RunStatus
	FailureCode string
	// Checkpoint, when set, replaces the run's checkpoint.
	Checkpoint *string
	// Retryable marks a failed verdict worth another attempt under the
	// card's retry policy (DESIGN.md#retries): a crash, say, rather than
	// the work's own verdict. Only with board.RunFailed.
	Retryable bool
}

// Finish ends the claim's run with v, files the card (finished: the
// completion state; failed: the failed state; resumable: back to the pool)
// and releases the claim, in one fenced write. It is for a claim made with
// Start. The claim's context is cancelled whatever the answer, as for
// Release.
func (cl *Claim) Finish(ctx context.Context, v Verdict) (apitype.FinishResponse, error) {
	var resp apitype.FinishResponse
	if cl.run.ID == "" {
		return resp, fmt.Errorf("%w: this claim has no run to finish (it was not made with Start)", board.ErrInvalidArgument)
	}
	err := cl.owned(ctx, http.MethodPost, "/finish", nil, apitype.FinishRequest{
		Fenced: cl.fence(), RunID: cl.run.ID, Status: v.Status, FailureCode: v.FailureCode, Checkpoint: v.Checkpoint,
		Retryable: v.Retryable,
	}, &resp)
	if err == nil {
		cl.end(ErrReleased)
	}
	return resp, err
}

func (cl *Claim) fence() apitype.Fenced { return apitype.Fenced{Epoch: cl.token.Epoch} }
