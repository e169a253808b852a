package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

// The run commands: the runs of the cards, read from the agent
// (GET /v1/runs, GET /v1/runs/{id}).

// runStatuses are the statuses `run ls --status` accepts.
var runStatuses = []board.RunStatus{
	board.RunRunning, board.RunQueued, board.RunPausedWaitingHuman, board.RunPausedOperator,
	board.RunFinished, board.RunFailed, board.RunFailedResumable, board.RunCancelled,
}

// checkpointWidth is how many display cells a checkpoint takes in `run ls`
// (-o wide shows it whole).
const checkpointWidth = 24

type runListOpts struct {
	card   string
	status string
	limit  int
	out    outputOpts
}

type runShowOpts struct {
	id  string
	out outputOpts
}

const runTimingsHelp = `A run records when it was created (a Start creates it running, so this is
when its card was started) and when it was last updated. FINISHED is that
last update once the run has a verdict (finished, failed, cancelled) or its
attempt ended resumable (failed_resumable): nothing writes to a run after
that until a Start resumes it. DURATION runs from created to finished, or
to now while the run is open (marked "+"). A resumed run keeps its id and
its created time, so its duration spans every attempt and the time between
them: when it was resumed is not recorded.`

func newRunCmd(env *cli) *cobra.Command {
	c := &cobra.Command{
		Use:   "run",
		Short: "List and show the runs of the cards",
		Args:  subcommandArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return withCode(exitUsage, cmd.Help()) },
	}

	var ls runListOpts
	cl := &cobra.Command{
		Use:   "ls [--card ID] [--status S] [--limit N] [-o json|yaml|wide]",
		Short: "List runs, newest first",
		Long: `List runs, newest first: id, card, the claim epoch it ran under, status,
failure code, checkpoint (cut to 24 display cells), created, finished and
duration.

--card lists one card's runs; without it the agent reads every card and
every run each names, one store read per run, so on a large board prefer
--card. --status keeps the runs in one status; --limit N the newest N.
All three are served by the agent.

` + runTimingsHelp + `

-o json (or --json) prints one array of runs as the API has them, -o yaml
the same in YAML; -o wide adds the owner, the column the run was started
from, the continuation and the last update, and shows whole checkpoints.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return runRunList(cmd.Context(), env, ls) },
	}
	cl.Flags().StringVar(&ls.card, "card", "", "only this card's runs")
	cl.Flags().StringVar(&ls.status, "status", "", "only runs in this status")
	cl.Flags().IntVar(&ls.limit, "limit", 0, "at most N runs, the newest (0: no limit)")
	addOutputFlags(cl, &ls.out, "wide: owner, started from, continuation, last update, whole checkpoints")

	var show runShowOpts
	cs := &cobra.Command{
		Use:   "show RUN_ID [-o json|yaml|wide]",
		Short: "Show one run",
		Long: `Show one run: its card and the claim epoch it ran under, its status,
failure code, checkpoint and continuation, its owner (marker, host, pid),
the column it was started from, and its timings.

` + runTimingsHelp,
		Args: exactArgs(1, "RUN_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			show.id = args[0]
			return runRunShow(cmd.Context(), env, show)
		},
	}
	addOutputFlags(cs, &show.out, "wide: as the default, which shows every field")

	c.AddCommand(cl, cs)
	return c
}

func runRunList(ctx context.Context, env *cli, o runListOpts) error {
	format, err := o.out.resolve()
	if err != nil {
		return err
	}
	if o.limit < 0 {
		return usageError("--limit %d: want 0 (no limit) or more", o.limit)
	}
	if o.status != "" && !board.RunStatus(o.status).Known() {
		names := make([]string, len(runStatuses))
		for i, s := range runStatuses {
			names[i] = string(s)
		}
		return usageError("--status %q: want one of %s", o.status, strings.Join(names, ", "))
	}
	c := env.client()
	runs, err := c.ListRuns(ctx, client.RunFilter{Card: o.card, Status: board.RunStatus(o.status), Limit: o.limit})
	if err != nil {
		return env.agentError(c, err)
	}
	if runs == nil {
		runs = []board.Run{}
	}
	if done, err := printOutput(env.stdout, format, runs); done {
		return err
	}
	now := time.Now()
	var t table
	if format == outputWide {
		t.row("RUN", "CARD", "EPOCH", "STATUS", "FAILURE", "CHECKPOINT", "CREATED", "FINISHED", "DURATION",
			"OWNER", "STARTED-FROM", "CONTINUATION", "UPDATED")
	} else {
		t.row("RUN", "CARD", "EPOCH", "STATUS", "FAILURE", "CHECKPOINT", "CREATED", "FINISHED", "DURATION")
	}
	for _, r := range runs {
		ended, _ := runEnded(r)
		cells := []string{r.ID, r.Card, strconv.FormatInt(r.Epoch, 10), string(r.Status), orDash(r.FailureCode)}
		if format == outputWide {
			cells = append(cells, orDash(printable(r.Checkpoint)), tableTime(r.CreatedAt), tableTime(ended), runDuration(r, now),
				orDash(r.Owner), orDash(r.StartedFrom), orDash(string(r.Continuation)), tableTime(r.UpdatedAt))
		} else {
			cells = append(cells, orDash(truncateCells(printable(r.Checkpoint), checkpointWidth)),
				tableTime(r.CreatedAt), tableTime(ended), runDuration(r, now))
		}
		t.row(cells...)
	}
	return t.write(env.stdout)
}

func runRunShow(ctx context.Context, env *cli, o runShowOpts) error {
	format, err := o.out.resolve()
	if err != nil {
		return err
	}
	c := env.client()
	r, err := c.GetRun(ctx, o.id)
	if err != nil {
		return env.agentError(c, err)
	}
	if done, err := printOutput(env.stdout, format, r); done {
		return err
	}
	printRun(env.stdout, r, time.Now()) // wide: the same; it shows every field
	return nil
}

func printRun(w io.Writer, r board.Run, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	ts := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	row("id", r.ID)
	row("card", r.Card)
	fmt.Fprintf(tw, "epoch:\t%d\n", r.Epoch)
	row("status", string(r.Status))
	row("failure_code", r.FailureCode)
	row("checkpoint", printable(r.Checkpoint))
	row("continuation", string(r.Continuation))
	row("owner", r.Owner)
	if r.Host != "" || r.PID != 0 {
		row("process", fmt.Sprintf("pid %d on %s", r.PID, orDash(r.Host)))
	}
	row("started_from", r.StartedFrom)
	row("created_at", ts(r.CreatedAt))
	ended, _ := runEnded(r)
	row("finished_at", ts(ended))
	row("updated_at", ts(r.UpdatedAt))
	row("duration", runDuration(r, now))
	_ = tw.Flush()
}

// runEnded is when a run's attempt ended: its last update, once it has a
// verdict or ended resumable (nothing writes to it after that until a
// Start resumes it); false while it is open (running, queued, paused).
func runEnded(r board.Run) (time.Time, bool) {
	switch r.Status {
	case board.RunFinished, board.RunFailed, board.RunCancelled, board.RunFailedResumable:
		return r.UpdatedAt, true
	}
	return time.Time{}, false
}

// runDuration is how long a run took: created to ended, or to now while it
// is open, marked "+" (it is still counting). "-" without a creation time.
func runDuration(r board.Run, now time.Time) string {
	if r.CreatedAt.IsZero() {
		return "-"
	}
	ended, ok := runEnded(r)
	suffix := ""
	if !ok {
		ended, suffix = now, "+"
	}
	d := max(ended.Sub(r.CreatedAt), 0)
	if d < time.Minute {
		d = d.Round(time.Millisecond)
	} else {
		d = d.Round(time.Second)
	}
	return d.String() + suffix
}

// printable is a checkpoint fit for one line of a terminal: quoted (Go
// syntax) when it holds a control character such as a newline, which the
// store allows in a checkpoint, as is otherwise.
func printable(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return strconv.Quote(s)
	}
	return s
}
