package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/agent/supervise"
	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

type claimOpts struct {
	card      string
	next      bool
	labels    []string
	resumable bool
	fresh     bool
	// grace is how long CMD has to stop after claim itself is sent SIGINT
	// or SIGTERM, capped by the deadline the agent still vouches for.
	grace time.Duration
	// heldExit and lostExit are the codes for a held card and a lost claim
	// (claimExitHeld, claimExitLost unless moved).
	heldExit, lostExit int
	command            []string
	// wait: block until the card (with --next, any matching card) can be
	// claimed, for as long as it says (DESIGN.md#waiting).
	wait waitFlag
}

// Exit codes of `claim`. CMD's own status passes through (0 filed the card
// to completion, anything else to failed or, with --resumable, back to the
// pool). A held card and a lost claim keep the codes scripts rely on, 3 and
// 4; a CMD that itself exits 3 or 4 can have them moved with --held-exit
// and --lost-exit, as flock(1) -E does. claim's other outcomes sit above any
// status a command normally returns, as timeout(1)'s do.
const (
	// claimExitHeld: the card is held by someone else; nothing was written.
	claimExitHeld = 3
	// claimExitLost: the claim was lost while CMD ran; CMD was stopped.
	claimExitLost = 4
	// claimExitUsage: bad flags or arguments.
	claimExitUsage = 120
	// claimExitWaiting: the card waits in waiting_deps on its blockers,
	// which the message names; nothing was written (claim it once they
	// complete: DESIGN.md#lifecycle-refusals).
	claimExitWaiting = 121
	// claimExitNothing: --next found no claimable card.
	claimExitNothing = 122
	// claimExitSink: the card is in a terminal state; nothing was written
	// (reopen it first).
	claimExitSink = 123
	// claimExitError: leasekeeper failed (agent unreachable, request
	// refused, store failure).
	claimExitError = 125
	// claimExitCannotRun / claimExitNotFound: CMD could not be started, as
	// a shell reports it: 127 when it does not exist (a path with no file,
	// a name not in PATH), 126 when it exists but cannot be executed.
	claimExitCannotRun = 126
	claimExitNotFound  = 127
)

const claimExitCodesHelp = `Exit codes:
  CMD's status  CMD ran; its own exit status (128+N if a signal N killed it)
  3    the card is held by someone else (nothing was written; --held-exit);
       with --wait, still held when the wait timed out
  4    the claim was lost while CMD ran; CMD was stopped (--lost-exit)
  120  usage error
  121  the card waits in waiting_deps on its blockers, which the message
       names (nothing was written; claim it once they complete); with
       --wait, still waiting when the wait timed out
  122  --next found no claimable card (with --wait: none before the
       timeout)
  123  the card is in a terminal state (nothing was written; reopen it first)
  125  leasekeeper failed: agent unreachable, request refused, store failure
  126  CMD was found but could not be executed (permission denied, not
       an executable)
  127  CMD was not found (no such file, not in PATH)
  130  interrupted (SIGINT; 143 for SIGTERM) while waiting (--wait):
       nothing was claimed`

// claimUsage is a bad invocation of claim.
func claimUsage(format string, args ...any) error {
	return withCode(claimExitUsage, fmt.Errorf(format, args...))
}

// columns are the board's columns `claim` routes a card through, read from
// the agent (GET /v1/board) so a custom board works as the default one does.
type columns struct {
	running    string
	completion string
	failed     string
	firstPool  string
	// runningIsPool is true on the local (bbolt) default board, where a
	// re-claim of a card in the running column resumes its recorded run
	// (DESIGN.md#twin-repark); a resumable failure then only releases the card.
	runningIsPool bool
}

// columnsOf picks the columns out of b, refusing a board that lacks one
// rather than guessing a name.
func columnsOf(b board.Board) (columns, error) {
	c := columns{
		running:    b.Running(),
		completion: b.Completion(),
		firstPool:  b.FirstPool(),
	}
	c.runningIsPool = c.running != "" && b.IsPool(c.running)
	if b.Has(board.StateFailed) {
		c.failed = board.StateFailed
	}
	switch {
	case c.running == "":
		return columns{}, errors.New("the agent's board has no running column")
	case c.completion == "":
		return columns{}, errors.New("the agent's board has no completion state")
	case c.failed == "":
		return columns{}, fmt.Errorf("the agent's board has no %q state to file failed runs into", board.StateFailed)
	case c.firstPool == "":
		return columns{}, errors.New("the agent's board has no pool state outside the running column")
	}
	return c, nil
}

// resumableCheckpoint is the checkpoint `claim --resumable` records on its
// run: CMD is declared safe to restart, from its own checkpoint if it keeps
// one.
const resumableCheckpoint = "restart-cmd"

// Stopping CMD after a lost claim: SIGTERM, then SIGKILL no later than
// killMargin before the lease deadline the agent last vouched for, and
// never more than maxKillGrace after the SIGTERM.
const (
	killMargin   = 250 * time.Millisecond
	maxKillGrace = 10 * time.Second
	// defaultGrace is --grace: how long CMD has to stop after claim is
	// interrupted.
	defaultGrace = 10 * time.Second
	// lateWriteTimeout bounds a write made after the claim ended (closing
	// the run of a lost claim): the agent may be the reason it ended, and
	// claim must exit in bounded time even when the agent is frozen.
	lateWriteTimeout = 2 * time.Second
)

// runClaim holds a claim while CMD runs: one Start (claim, run, move into
// the running column) before CMD, one Finish (verdict, filing, release)
// after it (docs/DESIGN.md#lifecycle).
func runClaim(ctx context.Context, env *cli, o claimOpts) error {
	// SIGINT/SIGTERM go to CMD; our own store calls must not be cut short
	// by them, or the card would be left half-routed.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	work := context.WithoutCancel(ctx)

	c := env.client()
	b, err := c.Board(work)
	if err != nil {
		return withCode(claimExitError, env.agentError(c, err))
	}
	if _, err := columnsOf(b); err != nil {
		return withCode(claimExitError, err)
	}
	// A resumable run is recorded with a checkpoint: that is what tells the
	// watchdog's liveness oracle, should this process die, to promote the
	// orphaned run to failed_resumable (back to the pool) rather than failed
	// — the same routing a non-zero exit gets here. A resumed run keeps the
	// checkpoint it recorded.
	spec := client.StartOptions{Fresh: o.fresh, Labels: o.labels}
	if o.resumable {
		spec.Checkpoint = resumableCheckpoint
	}
	cl, err := startClaim(ctx, env, c, o, spec)
	var timedOut string
	if we := (*client.WaitError)(nil); errors.As(err, &we) {
		if !errors.Is(err, context.DeadlineExceeded) {
			code, sig := interruptCode(sigs)
			return withCode(code, fmt.Errorf("interrupted (%v) while waiting: nothing was claimed", sig))
		}
		// Timed out: the exit code and message are those of the last
		// refusal, as if it had come without --wait.
		timedOut = fmt.Sprintf("timed out after %s waiting: ", o.wait.d)
		err = we.Last
	}
	switch {
	case err == nil && cl == nil:
		// Interrupted between two tries (startClaim said so).
		code, sig := interruptCode(sigs)
		return withCode(code, fmt.Errorf("interrupted (%v) while waiting: nothing was claimed", sig))
	case err == nil:
	case errors.Is(err, board.ErrClaimConflict):
		if ce, ok := board.AsClaimConflict(err); ok && ce.Holder != "" {
			return withCode(o.heldExit, fmt.Errorf("%scard %s is held by %s (epoch %d)", timedOut, ce.Card, ce.Holder, ce.Epoch))
		}
		return withCode(o.heldExit, fmt.Errorf("%s%w", timedOut, err))
	case errors.Is(err, board.ErrTerminalStateExit):
		return withCode(claimExitSink, err)
	case errors.Is(err, board.ErrWaitingOnBlockers):
		return withCode(claimExitWaiting, fmt.Errorf("%s%w", timedOut, err))
	case o.next && errors.Is(err, board.ErrNotFound):
		if len(o.labels) > 0 {
			return withCode(claimExitNothing, fmt.Errorf("%sno claimable card in a pool state carries the labels %q", timedOut, o.labels))
		}
		return withCode(claimExitNothing, fmt.Errorf("%sno claimable card in a pool state", timedOut))
	default:
		return withCode(claimExitError, env.agentError(c, err))
	}
	if o.wait.set && ctx.Err() != nil {
		// The signal came while the try that got the card was in flight:
		// the user asked to stop waiting, so the card goes straight back
		// (its run resumable) and nothing runs.
		code, sig := interruptCode(sigs)
		_, _ = finish(work, env, cl, board.RunFailedResumable, "INTERRUPTED")
		return withCode(code, fmt.Errorf("interrupted (%v) while waiting: the card granted at that moment was handed back", sig))
	}
	card, tok, run := cl.Card(), cl.Token(), cl.Run()
	how := "started run"
	if cl.Resumed() {
		how = "resumed run"
	}
	fmt.Fprintf(env.stderr, "leasekeeper: claimed %s (epoch %d) as %s; %s %s\n", card.ID, tok.Epoch, tok.Marker, how, run.ID)

	cmd := exec.Command(o.command[0], o.command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = env.stdin, env.stdout, env.stderr
	cmd.Env = append(os.Environ(),
		"LEASEKEEPER_CARD="+card.ID,
		"LEASEKEEPER_RUN="+run.ID,
		"LEASEKEEPER_MARKER="+tok.Marker,
		"LEASEKEEPER_EPOCH="+strconv.FormatInt(tok.Epoch, 10),
		"LEASEKEEPER_CHECKPOINT="+run.Checkpoint,
		apitype.SocketEnv+"="+c.SocketPath(),
	)
	child, err := startSupervised(cmd, cl.TrustedUntil().Add(-killMargin))
	if err != nil {
		code := claimExitCannotRun
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = claimExitNotFound
		}
		// Nothing ran: the card goes back to the pool, its run resumable.
		_, _ = finish(work, env, cl, board.RunFailedResumable, "CMD_NOT_STARTED")
		return withCode(code, err)
	}

	// The supervisor keeps the deadline too, and stops CMD's tree by it
	// should this process be unable to (stopped, starved): every deadline
	// the agent confirms is handed on (DESIGN.md#process-tree).
	handOn := func() { child.KillBy(cl.TrustedUntil().Add(-killMargin), killMargin) }
	handOn()

	var interrupted os.Signal
	var graceUp <-chan time.Time
	for {
		select {
		case <-cl.TrustMoved():
			handOn()
		case sig := <-sigs:
			// CMD is in this process's group and cgroup: a signal sent to
			// either reached it already, and the supervisor passes on only
			// what did not (DESIGN.md#one-signal).
			_ = child.Signal(sig)
			if interrupted == nil {
				interrupted = sig
				grace := min(o.grace, max(time.Until(cl.TrustedUntil())-killMargin, 0))
				fmt.Fprintf(env.stderr, "leasekeeper: %v: the command has %s to stop\n", sig, grace.Round(time.Millisecond))
				graceUp = time.After(grace)
			}
		case d := <-child.Deliveries():
			if d.Passed {
				fmt.Fprintf(env.stderr, "leasekeeper: %v: passed to the command\n", d.Signal)
			} else {
				fmt.Fprintf(env.stderr, "leasekeeper: %v: the command had it already (sent to the process group or the cgroup), not passed again\n", d.Signal)
			}
		case <-graceUp:
			graceUp = nil
			fmt.Fprintf(env.stderr, "leasekeeper: the command did not stop within its grace: killing it\n")
			go child.Terminate(0)
		case <-cl.Context().Done():
			return claimLost(work, env, cl, child, o.lostExit)
		case <-child.Done():
			if cl.Context().Err() != nil || child.Expired() {
				// The claim ended as CMD did (both were ready), or the
				// supervisor stopped CMD at the deadline this process last
				// confirmed (it was stopped itself, or its agent went
				// quiet): it is lost, whatever CMD's status says.
				return claimLost(work, env, cl, child, o.lostExit)
			}
			code, _ := child.Wait(work)
			reportTree(env, child)
			if interrupted != nil {
				return interruptedExit(work, env, cl, code, interrupted)
			}
			return routeExit(work, env, cl, code, child.KilledBy(), o.resumable, o.lostExit)
		}
	}
}

// startClaim is the Start (or StartNext) before CMD. With --wait, a first
// try that is refused for a reason waiting mends says so on stderr, and the
// client then waits, woken by the agent's event log (DESIGN.md#waiting),
// until the card can be started, the wait's duration passes, or a signal
// ends it (ctx is cancelled by the first SIGINT or SIGTERM). Each try runs
// to its answer whatever ctx does: a Start cut off mid-request could land
// unheard. A nil claim and a nil error mean a signal came before the wait
// began.
func startClaim(ctx context.Context, env *cli, c *client.Client, o claimOpts, spec client.StartOptions) (*client.Claim, error) {
	work := context.WithoutCancel(ctx)
	try := func() (*client.Claim, error) {
		if o.next {
			return c.StartNext(work, spec)
		}
		return c.Start(work, o.card, spec)
	}
	cl, err := try()
	var backoff time.Time
	if !o.next {
		backoff = c.BackoffOf(work, o.card, err)
	}
	if !o.wait.set || !client.Waitable(o.next, err) && backoff.IsZero() {
		return cl, err
	}
	what := "no claimable card in a pool state"
	switch ce, ok := board.AsClaimConflict(err); {
	case !backoff.IsZero():
		what = fmt.Sprintf("card %s backs off after a retryable failure until %s", o.card, backoff.UTC().Format(time.RFC3339))
	case !o.next && ok && ce.Holder != "":
		what = fmt.Sprintf("card %s is held by %s (epoch %d)", ce.Card, ce.Holder, ce.Epoch)
	case !o.next && errors.Is(err, board.ErrWaitingOnBlockers):
		what = fmt.Sprintf("card %s waits on its blockers", o.card)
	case len(o.labels) > 0:
		what = fmt.Sprintf("no claimable card in a pool state carries the labels %q", o.labels)
	}
	fmt.Fprintf(env.stderr, "leasekeeper: %s; waiting, %s\n", what, waitBound(o.wait.d))
	if ctx.Err() != nil {
		return nil, nil
	}
	wctx, cancel := waitContext(ctx, o.wait)
	defer cancel()
	spec.Wait = true
	if o.next {
		return c.StartNext(wctx, spec)
	}
	return c.Start(wctx, o.card, spec)
}

// supervisorCmdName is the hidden subcommand `claim` re-executes its own
// binary with to supervise CMD (see package supervise).
const supervisorCmdName = "claim-supervisor"

// startSupervised starts CMD under a supervisor, so that however the claim
// ends — CMD exits, the claim is lost, this process is killed, even with
// SIGKILL — nothing CMD started survives it (docs/OPERATIONS.md, "What
// `claim` does with its command's processes").
func startSupervised(cmd *exec.Cmd, killBy time.Time) (*supervise.Child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary to supervise the command: %w", err)
	}
	// This process's only child is the supervisor, so it may be a
	// subreaper too and collect the tree should the supervisor be killed.
	return supervise.Start(supervise.Launcher{Path: self, Args: []string{supervisorCmdName}, Subreaper: true,
		KillBy: killBy, KillGrace: killMargin}, cmd)
}

// reportTree says what, of CMD's tree, could not be stopped. The run is
// routed anyway: the claim ends either way, and the operator has the pids.
func reportTree(env *cli, child *supervise.Child) {
	if err := child.SupervisorErr(); err != nil {
		fmt.Fprintf(env.stderr, "leasekeeper: %v\n", err)
	}
	for _, s := range child.Survivors() {
		fmt.Fprintf(env.stderr, "leasekeeper: pid %d of the command's tree could not be stopped and runs on: %v\n", s.PID, s.Err)
	}
}

// claimLost stops CMD because the claim is gone: SIGTERM, then SIGKILL
// before the lease deadline. The holder must stop by its lease deadline on
// its own — the watchdog's orphan proof relies on it
// (DESIGN.md#trusted-deadline). There is no grace beyond that deadline: by
// the time a claim is lost, the agent no longer vouches for it.
func claimLost(ctx context.Context, env *cli, cl *client.Claim, child *supervise.Child, lostExit int) error {
	cause := context.Cause(cl.Context())
	if cause == nil {
		// The supervisor stopped CMD at the deadline this process handed
		// it, before the claim's own timer had its say (this process was
		// stopped, and is only now running again).
		cause = fmt.Errorf("%w: the command was stopped at the trusted deadline", client.ErrLeaseUntrusted)
	}
	fmt.Fprintf(env.stderr, "leasekeeper: claim on %s lost: %v; stopping the command\n", cl.Card().ID, cause)
	grace := min(max(time.Until(cl.TrustedUntil())-killMargin, 0), maxKillGrace)
	killed := child.Terminate(grace)
	switch {
	case child.Expired():
		fmt.Fprintf(env.stderr, "leasekeeper: the claim's supervisor stopped the command at the trusted deadline\n")
	case killed:
		fmt.Fprintf(env.stderr, "leasekeeper: the command ignored SIGTERM for %s: killed\n", grace.Round(time.Millisecond))
	}
	reportTree(env, child)
	// The run is the old holder's: recording its end is a late write, and
	// the fence refuses it unless the claim was lost only on this side (the
	// agent went silent, and may yet answer); then the card goes back to
	// the pool, its run resumable, since CMD was stopped, not failed. It
	// gets a bounded time, on a context of its own: claim exits promptly
	// even when its agent is frozen.
	lctx, cancel := context.WithTimeout(ctx, lateWriteTimeout)
	defer cancel()
	if _, err := cl.Finish(lctx, client.Verdict{Status: board.RunFailedResumable, FailureCode: "CLAIM_LOST"}); err != nil {
		fmt.Fprintf(env.stderr, "leasekeeper: late write refused, as it must be: %v\n", err)
	}
	return withCode(lostExit, fmt.Errorf("claim on %s lost: %w", cl.Card().ID, cause))
}

// finish is Finish, bounded and retried: the agent gets until the trusted
// deadline, plus lateWriteTimeout, and no more, so claim exits in bounded
// time even when its agent is frozen. A Finish whose answer was lost (the
// agent or the store went away mid-call) is sent again; when the retry is
// refused because the claim is gone, the run is read to learn whether the
// first one landed — the card released and the run carrying exactly this
// verdict under this claim's epoch. A refused fence otherwise means the
// claim ended on its own (an operator, the watchdog): the verdict is
// theirs to write now.
func finish(ctx context.Context, env *cli, cl *client.Claim, status board.RunStatus, code string) (apitype.FinishResponse, error) {
	return finishVerdict(ctx, env, cl, client.Verdict{Status: status, FailureCode: code})
}

// finishVerdict is finish with a whole verdict (a retryable one, say).
func finishVerdict(ctx context.Context, env *cli, cl *client.Claim, v client.Verdict) (apitype.FinishResponse, error) {
	ctx, cancel := context.WithDeadline(ctx, cl.TrustedUntil().Add(lateWriteTimeout))
	defer cancel()
	status := v.Status
	wait, uncertain := 100*time.Millisecond, false
	for {
		f, err := cl.Finish(ctx, v)
		if err == nil {
			return f, nil
		}
		if uncertain && errors.Is(err, board.ErrClaimConflict) {
			if f, ok := finishLanded(ctx, env, cl, status); ok {
				return f, nil
			}
		}
		if !finishRetryable(err) || ctx.Err() != nil {
			fmt.Fprintf(env.stderr, "leasekeeper: recording %s on %s: %v\n", status, cl.Card().ID, err)
			return f, err
		}
		uncertain = true
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// finishRetryable reports whether a failed Finish may not have been answered by
// the store at all: anything but the store's and the agent's own verdicts.
func finishRetryable(err error) bool {
	for _, answer := range []error{board.ErrClaimConflict, board.ErrInvalidArgument, board.ErrTransitionRejected, board.ErrNotFound, apitype.ErrForbidden} {
		if errors.Is(err, answer) {
			return false
		}
	}
	return true
}

// finishLanded reads whether an earlier Finish of cl with status landed.
func finishLanded(ctx context.Context, env *cli, cl *client.Claim, status board.RunStatus) (apitype.FinishResponse, bool) {
	c := env.client()
	run, err := c.GetRun(ctx, cl.Run().ID)
	if err != nil || run.Status != status || run.Epoch != cl.Token().Epoch {
		return apitype.FinishResponse{}, false
	}
	card, err := c.GetCard(ctx, cl.Card().ID)
	if err != nil || card.Token() == cl.Token() {
		return apitype.FinishResponse{}, false
	}
	return apitype.FinishResponse{Card: card, Run: run}, true
}

// routeExit records the run's verdict, files the card and releases the
// claim in one Finish: what the watchdog would do for a run that ended so
// (rows 9–11 of its table, DESIGN.md#decision-table). CMD's status is
// claim's. A CMD killed by a signal nobody sent it (sig: claim passed on
// none, its supervisor stopped it at no deadline) crashed: its failure,
// SIGNAL_N, is retryable under the card's retry policy
// (DESIGN.md#retries). An exit status, 128+N included, is the command's
// own verdict and is not retried. A crash is retryable under --resumable
// too: --resumable restarts a command that exits failing, not one that
// keeps crashing.
func routeExit(ctx context.Context, env *cli, cl *client.Claim, code int, sig syscall.Signal, resumable bool, lostExit int) error {
	id := cl.Card().ID
	status, failure, retryable := board.RunFinished, "", false
	switch {
	case code == 0 && sig == 0:
	case sig != 0:
		// A crash under --resumable too: a resumable return would be
		// the same attempt with no backoff on the local twin, and a
		// command that keeps crashing would be restarted for ever.
		status, failure, retryable = board.RunFailed, exitFailure(code, sig), true
	case resumable:
		status, failure = board.RunFailedResumable, exitFailure(code, sig)
	default:
		status, failure = board.RunFailed, exitFailure(code, sig)
	}
	f, err := finishVerdict(ctx, env, cl, client.Verdict{Status: status, FailureCode: failure, Retryable: retryable})
	if err != nil {
		if errors.Is(err, board.ErrClaimConflict) || cl.Context().Err() != nil && !errors.Is(context.Cause(cl.Context()), client.ErrReleased) {
			return withCode(lostExit, fmt.Errorf("claim on %s lost before its verdict landed: %w", id, err))
		}
		return withCode(claimExitError, err)
	}
	switch {
	case code == 0 && sig == 0:
		fmt.Fprintf(env.stderr, "leasekeeper: %s finished; filed to %s\n", id, f.Card.State)
		return nil
	case f.Card.GaveUp != nil:
		fmt.Fprintf(env.stderr, "leasekeeper: %s failed (%s); filed to %s: %s\n", id, failure, f.Card.State, f.Card.GaveUp.Reason)
	case retryable && !f.Card.RetryAt.IsZero():
		fmt.Fprintf(env.stderr, "leasekeeper: %s was killed by %v (%s), a crash: returned to %s for another attempt (%d spent so far), not before %s\n",
			id, sig, failure, f.Card.State, f.Card.Attempts, f.Card.RetryAt.Format(time.RFC3339))
	case resumable:
		fmt.Fprintf(env.stderr, "leasekeeper: %s failed with status %d; run is resumable, card released in %s (the next claim resumes it)\n", id, code, f.Card.State)
	default:
		fmt.Fprintf(env.stderr, "leasekeeper: %s failed with status %d; filed to %s\n", id, code, f.Card.State)
	}
	return withCode(code, fmt.Errorf("command exited with status %d", code))
}

// interruptedExit ends a claim whose process was told to stop: the work is
// not done and did not fail on its own, so the card goes back to the pool
// with its run resumable — never into a sink — and claim exits as CMD did
// (128+N when the signal or the kill after the grace ended it).
func interruptedExit(ctx context.Context, env *cli, cl *client.Claim, code int, sig os.Signal) error {
	f, err := finish(ctx, env, cl, board.RunFailedResumable, "INTERRUPTED")
	if err == nil {
		fmt.Fprintf(env.stderr, "leasekeeper: %s interrupted (%v); run is resumable, card released in %s\n", cl.Card().ID, sig, f.Card.State)
	}
	if code == 0 {
		// CMD caught the signal and exited cleanly, but the card was
		// returned, not finished: say so in the status.
		if s, ok := sig.(syscall.Signal); ok {
			code = 128 + int(s)
		}
	}
	return withCode(code, fmt.Errorf("interrupted by %v", sig))
}

// exitFailure is the failure code of CMD's end: EXIT_N for a status,
// SIGNAL_N for a signal that killed it (DESIGN.md#retries).
func exitFailure(code int, sig syscall.Signal) string {
	if sig != 0 {
		return fmt.Sprintf("SIGNAL_%d", int(sig))
	}
	return fmt.Sprintf("EXIT_%d", code)
}
