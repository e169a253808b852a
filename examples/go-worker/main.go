// Command go-worker is an example leasekeeper worker written against the Go
// client package. It takes the oldest claimable card, records a run, does
// its work, records the run's verdict, files the card and releases the
// claim, then takes the next one, until the pool is empty.
//
// Its "work" is a wait of -work per card, standing in for a build or a
// batch job; a card labelled "fail" stands for work that fails. What the
// example is about is everything around the work:
//
//   - The work runs under the claim's Context. The client cancels it when
//     the agent reports the claim lost (an operator force-released it, the
//     lease could not be renewed) and, by itself, when it stops hearing the
//     agent before the lease it last vouched for runs out. A worker that
//     keeps working past that point is working toward writes the fence will
//     refuse, and the watchdog relies on holders stopping on their own
//     (DESIGN.md#client-deadline), so the worker drops the card at once and writes nothing
//     more for it.
//   - Every write is fenced by the claim token; a refused write
//     (board.ErrClaimConflict) also ends the claim.
//   - SIGINT or SIGTERM stops the current card's work, records the run as
//     failed_resumable and hands the card back to the pool, then exits.
//
// Usage:
//
//	go-worker [-socket PATH] [-work 2s] [-max N]
//
// The agent is found through -socket, else LEASEKEEPER_SOCKET, else the
// default path (see `leasekeeper --help`).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

// The columns the worker moves a card through: the default board's names.
// The socket does not publish the board, so a board that renames them
// needs these flags changed too.
type columns struct {
	running, done, failed string
}

type worker struct {
	c    *client.Client
	work time.Duration
	cols columns
	out  io.Writer
}

// outcome is what happened to one claimed card.
type outcome int

const (
	outcomeFiled       outcome = iota // the run's verdict is recorded and the card filed
	outcomeLost                       // the claim was lost; nothing more was written
	outcomeInterrupted                // stopped by a signal; the card was handed back
)

func main() {
	socket := flag.String("socket", "", "agent socket (default: LEASEKEEPER_SOCKET or the runtime directory)")
	work := flag.Duration("work", 2*time.Second, "how long the simulated work on one card takes")
	maxCards := flag.Int("max", 0, "stop after this many claimed cards (0: until the pool is empty)")
	running := flag.String("running-state", board.StateInProgress, "the board's running column")
	done := flag.String("done-state", board.StateDone, "the board's completion state")
	failed := flag.String("failed-state", board.StateFailed, "the state a failed run's card is filed to")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w := &worker{
		c:    &client.Client{Socket: *socket},
		work: *work,
		cols: columns{running: *running, done: *done, failed: *failed},
		out:  os.Stdout,
	}
	if err := w.loop(ctx, *maxCards); err != nil {
		fmt.Fprintln(os.Stderr, "go-worker:", err)
		os.Exit(1)
	}
}

// loop claims and handles cards until the pool is empty, max cards were
// handled, or ctx ends.
func (w *worker) loop(ctx context.Context, maxCards int) error {
	for n := 0; maxCards == 0 || n < maxCards; n++ {
		if ctx.Err() != nil {
			return nil
		}
		cl, err := w.c.ClaimNext(ctx)
		switch {
		case errors.Is(err, board.ErrNotFound):
			fmt.Fprintln(w.out, "pool empty: nothing left to claim")
			return nil
		case errors.Is(err, board.ErrClaimConflict):
			// Another worker took the card between the listing and the
			// grant: simply ask again.
			continue
		case err != nil:
			return fmt.Errorf("claim next: %w", err)
		}
		o, err := w.handle(ctx, cl)
		if err != nil {
			return err
		}
		if o == outcomeInterrupted {
			return nil
		}
	}
	return nil
}

// handle works one claimed card. Writes use a context detached from the
// signal context (a SIGTERM must not leave the card half-routed) but bounded
// in time.
func (w *worker) handle(ctx context.Context, cl *client.Claim) (outcome, error) {
	card, tok := cl.Card(), cl.Token()
	fmt.Fprintf(w.out, "claimed %s at epoch %d as %s\n", card.ID, tok.Epoch, tok.Marker)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()

	// lost reports whether err (or the claim's context) says the claim is
	// gone; the client has already cancelled the claim's Context then.
	lost := func(step string, err error) (outcome, error) {
		if errors.Is(err, board.ErrClaimConflict) || cl.Context().Err() != nil {
			fmt.Fprintf(w.out, "claim on %s lost during %s: %v\n", card.ID, step, context.Cause(cl.Context()))
			return outcomeLost, nil
		}
		// Anything else (the agent unreachable, a store error) is a
		// failure of this worker; the claim stays until its lease runs out
		// and the watchdog rules on it.
		return 0, fmt.Errorf("%s on %s: %w", step, card.ID, err)
	}

	run, err := cl.StartRun(wctx, client.RunSpec{})
	if err != nil {
		return lost("start run", err)
	}
	if card.State != w.cols.running {
		if _, err := cl.SetState(wctx, w.cols.running); err != nil {
			return lost("move to "+w.cols.running, err)
		}
	}
	fmt.Fprintf(w.out, "working on %s (run %s)\n", card.ID, run.ID)

	workErr := w.doWork(ctx, cl)
	switch {
	case cl.Context().Err() != nil:
		// The claim ended while working: stop here. Recording the run or
		// filing the card would be a late write that the fence refuses.
		fmt.Fprintf(w.out, "claim on %s lost while working: %v; stopped\n", card.ID, context.Cause(cl.Context()))
		return outcomeLost, nil
	case ctx.Err() != nil:
		// Interrupted by a signal: the run may be restarted, so it is
		// resumable and the card goes back to the pool.
		if err := w.closeRun(wctx, cl, run.ID, board.RunFailedResumable); err != nil {
			return lost("record run failed_resumable", err)
		}
		if err := cl.Release(wctx); err != nil {
			return lost("release", err)
		}
		fmt.Fprintf(w.out, "interrupted: %s handed back to the pool\n", card.ID)
		return outcomeInterrupted, nil
	}

	// Route the card the way the watchdog would route a dead owner's
	// (rows 9 and 10 of its decision table), so the two always agree.
	status, target, reason := board.RunFinished, w.cols.done, board.ReasonRunFinished
	if workErr != nil {
		status, target, reason = board.RunFailed, w.cols.failed, board.ReasonRunFailed
	}
	if err := w.closeRun(wctx, cl, run.ID, status); err != nil {
		return lost("record run "+string(status), err)
	}
	if _, err := cl.SetState(wctx, target, client.WithReason(reason)); err != nil {
		return lost("file to "+target, err)
	}
	if err := cl.Release(wctx); err != nil {
		return lost("release", err)
	}
	fmt.Fprintf(w.out, "%s: run %s %s, card filed to %s\n", card.ID, run.ID, status, target)
	return outcomeFiled, nil
}

var errWorkFailed = errors.New("the work failed")

// doWork stands in for real work. It honours both contexts: the claim's
// (the claim is gone) and the process's (a signal).
func (w *worker) doWork(ctx context.Context, cl *client.Claim) error {
	t := time.NewTimer(w.work)
	defer t.Stop()
	select {
	case <-t.C:
	case <-cl.Context().Done():
		return context.Cause(cl.Context())
	case <-ctx.Done():
		return ctx.Err()
	}
	if slices.Contains(cl.Card().Labels, "fail") {
		return errWorkFailed
	}
	return nil
}

// closeRun records the run's verdict, compare-and-set on running so a
// verdict the watchdog already wrote is never overwritten.
func (w *worker) closeRun(ctx context.Context, cl *client.Claim, runID string, status board.RunStatus) error {
	running := board.RunRunning
	_, err := cl.UpdateRun(ctx, runID, apitype.UpdateRunRequest{IfStatus: &running, Status: &status})
	return err
}
