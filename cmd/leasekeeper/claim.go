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
	resumable bool
	command   []string
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
)

// runClaim holds a claim while CMD runs and routes the card the way the
// watchdog would for a dead owner, so both agree (DESIGN.md#decision-table, rows 9–11).
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
		return env.agentError(c, err)
	}
	cols, err := columnsOf(b)
	if err != nil {
		return err
	}
	var cl *client.Claim
	if o.next {
		cl, err = c.ClaimNext(work)
	} else {
		cl, err = c.Claim(work, o.card)
	}
	switch {
	case err == nil:
	case errors.Is(err, board.ErrClaimConflict):
		if ce, ok := board.AsClaimConflict(err); ok && ce.Holder != "" {
			return withCode(exitHeld, fmt.Errorf("card %s is held by %s (epoch %d)", ce.Card, ce.Holder, ce.Epoch))
		}
		return withCode(exitHeld, err)
	case o.next && errors.Is(err, board.ErrNotFound):
		return withCode(exitNothing, errors.New("no claimable card in a pool state"))
	default:
		return env.agentError(c, err)
	}
	card, tok := cl.Card(), cl.Token()
	fmt.Fprintf(env.stderr, "leasekeeper: claimed %s (epoch %d) as %s\n", card.ID, tok.Epoch, tok.Marker)

	// lost turns any failure of an owned write into the right exit: a
	// refused fence (or a claim context already ended) is exit 4.
	lost := func(step string, err error) error {
		if errors.Is(err, board.ErrClaimConflict) || cl.Context().Err() != nil {
			cause := context.Cause(cl.Context())
			if cause == nil {
				cause = err
			}
			return withCode(exitLost, fmt.Errorf("claim on %s lost (%s): %w", card.ID, step, cause))
		}
		return fmt.Errorf("%s: %w", step, err)
	}
	release := func() {
		if err := cl.Release(work); err != nil && !errors.Is(err, board.ErrClaimConflict) {
			fmt.Fprintf(env.stderr, "leasekeeper: releasing %s: %v\n", card.ID, err)
		}
	}

	// A resumable run is recorded with a checkpoint: that is what tells the
	// watchdog's liveness oracle, should this process die, to promote the
	// orphaned run to failed_resumable (back to the pool) rather than failed
	// — the same routing a non-zero exit gets here.
	var spec client.RunSpec
	if o.resumable {
		spec.Checkpoint = resumableCheckpoint
	}
	run, err := cl.StartRun(work, spec)
	if err != nil {
		release()
		return lost("start run", err)
	}
	if card.State != cols.running {
		if _, err := cl.SetState(work, cols.running); err != nil {
			closeRun(work, env, cl, run.ID, board.RunFailed)
			// The move may have landed although its answer was lost. A
			// release would then leave the card free in the running
			// column, which on a board where it is not a pool state
			// nothing ever picks up: move it back to where it was claimed
			// from first (a no-op when the move did not land), and leave
			// the claim to expire — the watchdog rules on it — when even
			// that cannot be confirmed.
			if !errors.Is(err, board.ErrClaimConflict) {
				if _, berr := cl.SetState(work, card.State); berr != nil {
					fmt.Fprintf(env.stderr, "leasekeeper: moving %s back to %s: %v; leaving the claim to expire\n", card.ID, card.State, berr)
					return lost("move to "+cols.running, err)
				}
			}
			release()
			return lost("move to "+cols.running, err)
		}
	}

	cmd := exec.Command(o.command[0], o.command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = env.stdin, env.stdout, env.stderr
	cmd.Env = append(os.Environ(),
		"LEASEKEEPER_CARD="+card.ID,
		"LEASEKEEPER_RUN="+run.ID,
		"LEASEKEEPER_MARKER="+tok.Marker,
		"LEASEKEEPER_EPOCH="+strconv.FormatInt(tok.Epoch, 10),
		apitype.SocketEnv+"="+c.SocketPath(),
	)
	child, err := startSupervised(cmd)
	if err != nil {
		closeRun(work, env, cl, run.ID, board.RunFailed)
		if _, serr := cl.SetState(work, cols.failed, client.WithReason(board.ReasonRunFailed)); serr != nil {
			fmt.Fprintf(env.stderr, "leasekeeper: filing %s to %s: %v\n", card.ID, cols.failed, serr)
		}
		release()
		return err
	}

	for {
		select {
		case sig := <-sigs:
			_ = child.Signal(sig)
		case <-cl.Context().Done():
			return claimLost(work, env, cl, child, run.ID)
		case <-child.Done():
			code, _ := child.Wait(work)
			reportTree(env, child)
			return routeExit(work, env, cl, cols, run.ID, code, o.resumable, lost)
		}
	}
}

// supervisorCmdName is the hidden subcommand `claim` re-executes its own
// binary with to supervise CMD (see package supervise).
const supervisorCmdName = "claim-supervisor"

// startSupervised starts CMD under a supervisor, so that however the claim
// ends — CMD exits, the claim is lost, this process is killed, even with
// SIGKILL — nothing CMD started survives it (docs/OPERATIONS.md, "What
// `claim` does with its command's processes").
func startSupervised(cmd *exec.Cmd) (*supervise.Child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary to supervise the command: %w", err)
	}
	// This process's only child is the supervisor, so it may be a
	// subreaper too and collect the tree should the supervisor be killed.
	return supervise.Start(supervise.Launcher{Path: self, Args: []string{supervisorCmdName}, Subreaper: true}, cmd)
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
// (DESIGN.md#client-deadline).
func claimLost(ctx context.Context, env *cli, cl *client.Claim, child *supervise.Child, runID string) error {
	cause := context.Cause(cl.Context())
	fmt.Fprintf(env.stderr, "leasekeeper: claim on %s lost: %v; stopping the command\n", cl.Card().ID, cause)
	grace := min(max(time.Until(cl.TrustedUntil())-killMargin, 0), maxKillGrace)
	if killed := child.Terminate(grace); killed {
		fmt.Fprintf(env.stderr, "leasekeeper: the command ignored SIGTERM for %s: killed\n", grace.Round(time.Millisecond))
	}
	reportTree(env, child)
	// The run is the old holder's: recording its end is a late write, and
	// the fence refuses it. It is attempted anyway so that a claim lost
	// only on this side (the agent went silent) may still close its run;
	// but a client that gives a claim up at its trusted deadline also hands
	// the card back as it does, and once that release has landed this write
	// is refused too.
	if err := closeRun(ctx, env, cl, runID, board.RunFailed); err != nil {
		fmt.Fprintf(env.stderr, "leasekeeper: late write refused, as it must be: %v\n", err)
	}
	return withCode(exitLost, fmt.Errorf("claim on %s lost: %w", cl.Card().ID, cause))
}

// routeExit records the run's verdict and files the card as the watchdog
// would (rows 9–11 of its decision table), then releases the claim.
//
// A resumable failure follows the watchdog's repark, twin by twin (DESIGN.md#twin-repark): where the running column is itself a pool state (the local board) the
// card is only released and the next claim resumes the run it records;
// where it is not (the fleet board) the card goes back to the first pool
// state first, since nothing would ever claim it in the running column. That
// move is the owner's own gesture, not a machine decision, so it carries no
// machine reason and fires as any hand-back does.
func routeExit(ctx context.Context, env *cli, cl *client.Claim, cols columns, runID string, code int, resumable bool,
	lost func(string, error) error) error {
	id := cl.Card().ID
	status, target, reason := board.RunFinished, cols.completion, board.ReasonRunFinished
	var opts []client.StateOption
	switch {
	case code == 0:
	case resumable:
		status, target, reason = board.RunFailedResumable, "", board.ReasonNone
		if !cols.runningIsPool {
			// A CAS on the running column: a card an operator moved while
			// CMD ran stays where they put it.
			target = cols.firstPool
			opts = append(opts, client.From(cols.running))
		}
	default:
		status, target, reason = board.RunFailed, cols.failed, board.ReasonRunFailed
	}
	if err := closeRun(ctx, env, cl, runID, status); err != nil {
		return lost("record run "+string(status), err)
	}
	if target != "" {
		if _, err := cl.SetState(ctx, target, append(opts, client.WithReason(reason))...); err != nil {
			return lost("file to "+target, err)
		}
	}
	if err := cl.Release(ctx); err != nil {
		return lost("release", err)
	}
	switch {
	case code == 0:
		fmt.Fprintf(env.stderr, "leasekeeper: %s finished; filed to %s\n", id, target)
		return nil
	case resumable && target != "":
		fmt.Fprintf(env.stderr, "leasekeeper: %s failed with status %d; run is resumable, card returned to %s and released\n", id, code, target)
	case resumable:
		fmt.Fprintf(env.stderr, "leasekeeper: %s failed with status %d; run is resumable, card released (a re-claim resumes it)\n", id, code)
	default:
		fmt.Fprintf(env.stderr, "leasekeeper: %s failed with status %d; filed to %s\n", id, code, target)
	}
	return withCode(exitCmdFailed, fmt.Errorf("command exited with status %d", code))
}

// closeRun moves the run out of running, compare-and-set on running so a
// verdict already written elsewhere (the watchdog's) is never overwritten.
func closeRun(ctx context.Context, _ *cli, cl *client.Claim, runID string, status board.RunStatus) error {
	running := board.RunRunning
	_, err := cl.UpdateRun(ctx, runID, apitype.UpdateRunRequest{IfStatus: &running, Status: &status})
	return err
}
