// Command go-worker is an example leasekeeper worker written against the Go
// client package. Each card's life is two calls:
//
//   - client.StartNext claims the oldest claimable card, starts its run and
//     moves the card into the running column, in one atomic write. When the
//     card records a run without a final verdict (one this worker or
//     another left resumable, or one whose claim an operator broke), the
//     local bbolt store resumes that run instead: same run id, its
//     checkpoint handed back (Claim.Resumed, Claim.Run().Checkpoint), so
//     the work goes on from where it stopped.
//   - Claim.Finish records the run's verdict, has the board file the card
//     (finished: the completion state; failed: failed; failed_resumable:
//     back to the pool) and releases the claim, in one fenced write.
//
// Its "work" is a wait of -work per card, standing in for a build or a
// batch job; a card labelled "fail" stands for work that fails. Progress is
// kept as the run's checkpoint ("worked-ms=N"): a resumed run only waits
// what is left. What the example is about is everything around the work:
//
//   - The work runs under the claim's Context. The client cancels it when
//     the agent reports the claim lost (an operator force-released it, the
//     lease could not be renewed) and, by itself, when it stops hearing the
//     agent before the lease it last vouched for runs out (the client also
//     pings in keepalive liveness mode, and opens the watch stream before
//     it asks for the claim). A worker that keeps working past that point
//     is working toward writes the fence will refuse, and the watchdog
//     relies on holders stopping on their own, so the worker stops at once.
//   - Once stopped, it sends its verdict one last time, bounded: the fence,
//     not the worker, knows whether the claim is over. After a claim_lost
//     it is refused and writes nothing; after the worker stopped because
//     the agent went quiet, the agent may still hold the claim, and then
//     the card goes back to the pool with the progress made.
//   - Every write is fenced by the claim token; a refused write
//     (board.ErrClaimConflict) also ends the claim.
//   - SIGINT or SIGTERM stops the current card's work and finishes its run
//     as failed_resumable at the progress made, which hands the card back
//     to the pool for the next Start to resume, then exits.
//
// With -wait, an empty pool does not end the worker: StartNext waits for
// the next claimable card (StartOptions.Wait), woken by the agent's event
// log the moment a card is created, released or moved into the pool
// (DESIGN.md#waiting), until SIGINT or SIGTERM.
//
// Usage:
//
//	go-worker [-socket PATH] [-work 2s] [-max N] [-label L]... [-wait]
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

type worker struct {
	c    *client.Client
	work time.Duration
	out  io.Writer
	// labels: start only cards carrying every one (DESIGN.md#label-routing).
	labels []string
	// wait: an empty pool is waited on, not the end (DESIGN.md#waiting).
	wait bool
}

// labelFlags is a repeatable -label flag.
type labelFlags []string

func (l *labelFlags) String() string     { return strings.Join(*l, ",") }
func (l *labelFlags) Set(v string) error { *l = append(*l, v); return nil }

// outcome is what happened to one claimed card.
type outcome int

const (
	outcomeFiled       outcome = iota // the run's verdict is recorded and the card filed
	outcomeLost                       // the claim was lost; the fence has the last word
	outcomeInterrupted                // stopped by a signal; the card was handed back
)

const (
	// writeTimeout bounds Start and Finish.
	writeTimeout = 30 * time.Second
	// lateWriteTimeout bounds the verdict sent after the claim ended: the
	// agent may be the reason it ended, and the worker must go on (or
	// exit) in bounded time even when the agent is frozen.
	lateWriteTimeout = 2 * time.Second
)

func main() {
	socket := flag.String("socket", "", "agent socket (default: LEASEKEEPER_SOCKET or the runtime directory)")
	work := flag.Duration("work", 2*time.Second, "how long the simulated work on one card takes")
	maxCards := flag.Int("max", 0, "stop after this many claimed cards (0: until the pool is empty)")
	var labels labelFlags
	flag.Var(&labels, "label", "start only cards carrying this label (repeatable: all of them)")
	wait := flag.Bool("wait", false, "when the pool is empty, wait for new work instead of exiting")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w := &worker{c: &client.Client{Socket: *socket}, work: *work, out: os.Stdout, labels: labels, wait: *wait}
	if err := w.loop(ctx, *maxCards); err != nil {
		fmt.Fprintln(os.Stderr, "go-worker:", err)
		os.Exit(1)
	}
}

// loop starts and handles cards until the pool is empty, max cards were
// handled, or ctx ends.
func (w *worker) loop(ctx context.Context, maxCards int) error {
	for n := 0; maxCards == 0 || n < maxCards; n++ {
		if ctx.Err() != nil {
			return nil
		}
		// The checkpoint marks the run resumable: should this process die,
		// the watchdog returns the card to the pool rather than failing it.
		// A resumed run keeps its own checkpoint.
		opts := client.StartOptions{Checkpoint: checkpoint(0), Labels: w.labels}
		var cl *client.Claim
		var err error
		if w.wait {
			cl, err = w.startWaiting(ctx, opts)
		} else {
			// Detached from the signal: a Start cut off mid-request may
			// still land, and would leave the card claimed by a worker
			// that never heard the answer. A signal that arrives now is
			// seen by handle, which hands the card straight back.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
			cl, err = w.c.StartNext(sctx, opts)
			cancel()
		}
		var we *client.WaitError
		switch {
		case errors.As(err, &we):
			return nil // a signal ended the wait: nothing was claimed
		case errors.Is(err, board.ErrNotFound):
			fmt.Fprintln(w.out, "pool empty: nothing left to claim")
			return nil
		case errors.Is(err, board.ErrClaimConflict):
			// Another worker took the card between the pick and the grant:
			// nothing was written; simply ask again.
			continue
		case err != nil:
			return fmt.Errorf("start next: %w", err)
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

// startWaiting starts the next card, waiting for one when the pool is
// empty. The client reads the event log's head, tries, and then follows
// the log from that head, trying again on each event that may have made a
// card claimable (DESIGN.md#waiting). The wait ends with ctx (a signal);
// each try runs to its answer regardless, so a card granted at that moment
// comes back and handle hands it straight back.
func (w *worker) startWaiting(ctx context.Context, opts client.StartOptions) (*client.Claim, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	cl, err := w.c.StartNext(sctx, opts)
	cancel()
	if !errors.Is(err, board.ErrNotFound) {
		return cl, err
	}
	fmt.Fprintln(w.out, "pool empty: waiting for work")
	opts.Wait = true
	return w.c.StartNext(ctx, opts)
}

// handle works one started card and finishes it. Finish uses a context
// detached from the signal context (a SIGTERM must not leave the card
// half-routed) but bounded in time.
func (w *worker) handle(ctx context.Context, cl *client.Claim) (outcome, error) {
	card, tok, run := cl.Card(), cl.Token(), cl.Run()
	if cl.Resumed() {
		fmt.Fprintf(w.out, "claimed %s at epoch %d as %s; resumed run %s at checkpoint %q\n", card.ID, tok.Epoch, tok.Marker, run.ID, run.Checkpoint)
	} else {
		fmt.Fprintf(w.out, "claimed %s at epoch %d as %s; started run %s\n", card.ID, tok.Epoch, tok.Marker, run.ID)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()

	worked, workErr := w.doWork(ctx, cl, workedSoFar(run.Checkpoint))
	progress := checkpoint(worked)
	switch {
	case cl.Context().Err() != nil:
		// The claim ended while working: stop here.
		fmt.Fprintf(w.out, "claim on %s lost while working: %v; stopped\n", card.ID, context.Cause(cl.Context()))
		w.lateVerdict(ctx, cl, progress)
		return outcomeLost, nil
	case ctx.Err() != nil:
		// Interrupted by a signal: the work may go on later, so the run is
		// resumable at the progress made and the card goes back to the pool.
		f, err := cl.Finish(wctx, client.Verdict{Status: board.RunFailedResumable, FailureCode: "INTERRUPTED", Checkpoint: &progress})
		if err != nil {
			return w.refused(cl, "hand back", err)
		}
		fmt.Fprintf(w.out, "interrupted: %s handed back to the pool in %s; run %s resumable at checkpoint %q\n", card.ID, f.Card.State, run.ID, progress)
		return outcomeInterrupted, nil
	}

	// The board files the card as the watchdog would file a dead owner's
	// (rows 9 and 10 of its decision table), so the two always agree.
	v := client.Verdict{Status: board.RunFinished}
	if workErr != nil {
		v = client.Verdict{Status: board.RunFailed, FailureCode: "WORK_FAILED"}
	}
	f, err := cl.Finish(wctx, v)
	if err != nil {
		return w.refused(cl, "finish", err)
	}
	fmt.Fprintf(w.out, "%s: run %s %s, card filed to %s\n", card.ID, run.ID, f.Run.Status, f.Card.State)
	return outcomeFiled, nil
}

// refused sorts out a Finish that failed. A claim conflict is the fence
// refusing it: the claim was lost before the verdict landed, and the whole
// write was refused, so nothing of it (verdict, filing, release) happened.
// Anything else (the agent unreachable, a store error) is a failure of this
// worker; the claim stays until its lease runs out and the watchdog rules
// on it.
func (w *worker) refused(cl *client.Claim, step string, err error) (outcome, error) {
	if errors.Is(err, board.ErrClaimConflict) {
		fmt.Fprintf(w.out, "claim on %s lost before its verdict landed (%s refused, nothing written): %v\n", cl.Card().ID, step, err)
		return outcomeLost, nil
	}
	return 0, fmt.Errorf("%s on %s: %w", step, cl.Card().ID, err)
}

// lateVerdict sends the verdict of a claim that ended on this side, once.
// Whether the claim is over at the agent is the fence's to say: after a
// claim_lost the agent already let the claim go (a force-release closed
// the run resumable itself), so the Finish is refused and writes nothing;
// when the client stopped because the agent went quiet, the agent may still
// hold the claim for this process, and then the Finish lands and returns
// the card to the pool with the progress made. It gets a short timeout on
// a context of its own: the agent may be the reason the claim ended.
func (w *worker) lateVerdict(ctx context.Context, cl *client.Claim, progress string) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lateWriteTimeout)
	defer cancel()
	f, err := cl.Finish(lctx, client.Verdict{Status: board.RunFailedResumable, FailureCode: "CLAIM_LOST", Checkpoint: &progress})
	switch {
	case err == nil:
		fmt.Fprintf(w.out, "late verdict on %s landed: card back in %s, run %s resumable\n", cl.Card().ID, f.Card.State, f.Run.ID)
	case errors.Is(err, board.ErrClaimConflict):
		fmt.Fprintf(w.out, "late verdict on %s refused by the fence, nothing written: %v\n", cl.Card().ID, err)
	default:
		fmt.Fprintf(w.out, "late verdict on %s not answered: %v\n", cl.Card().ID, err)
	}
}

var errWorkFailed = errors.New("the work failed")

// doWork stands in for real work, of which done is already behind it (a
// resumed run). It honours both contexts: the claim's (the claim is gone)
// and the process's (a signal). worked is the progress made in all, what
// a resumable verdict records.
func (w *worker) doWork(ctx context.Context, cl *client.Claim, done time.Duration) (worked time.Duration, err error) {
	left := max(w.work-done, 0)
	began := time.Now()
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-t.C:
	case <-cl.Context().Done():
		return done + min(time.Since(began), left), context.Cause(cl.Context())
	case <-ctx.Done():
		return done + min(time.Since(began), left), ctx.Err()
	}
	if slices.Contains(cl.Card().Labels, "fail") {
		return done + left, errWorkFailed
	}
	return done + left, nil
}

// checkpointPrefix starts the checkpoints this worker records: how much
// of the work is behind the run.
const checkpointPrefix = "worked-ms="

func checkpoint(worked time.Duration) string {
	return checkpointPrefix + strconv.FormatInt(worked.Milliseconds(), 10)
}

// workedSoFar reads a checkpoint this worker recorded; any other (a run
// started by another program) means the work starts over.
func workedSoFar(cp string) time.Duration {
	ms, err := strconv.ParseInt(strings.TrimPrefix(cp, checkpointPrefix), 10, 64)
	if !strings.HasPrefix(cp, checkpointPrefix) || err != nil || ms < 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}
