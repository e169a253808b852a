package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

// The board-administration commands (DESIGN.md#label-sweeps): state and label sweeps
// run by the agent (package boardadmin) and reported here card by card.

const sweepHelp = `The agent walks a snapshot of the cards and writes each one with a
compare-and-set on what it read; a card another writer changed meanwhile is
re-read and transformed again (a few attempts), so no concurrent change is
lost and a one-shot label consumed mid-sweep stays consumed. Every write
carries machine provenance: it fires no effect (no launch, no promotion, no
one-shot consumption). Claims are never touched.

The summary counts the cards changed, unchanged and contended. A contended
card is one other writers kept changing through every attempt: the rest of
the walk completes without it, the command exits 1, and running the same
command again picks it up.

--dry-run decides and writes nothing (not the board, not a card): it runs
the same checks, so a refusal is the same, and prints how many cards the
command would change and which (the first 20 ids), with the board it
would leave. --progress prints how far the walk got on stderr, every 100
cards and at the last; it is on by default when stderr is a terminal
(--progress=false turns it off).`

func newBoardStateCmd(env *cli) *cobra.Command {
	c := &cobra.Command{
		Use:   "state",
		Short: "Rename or delete a state of the board (operator)",
		Args:  subcommandArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return withCode(exitUsage, cmd.Help()) },
	}
	var so sweepOpts
	rename := &cobra.Command{
		Use:   "rename OLD NEW",
		Short: "Rename a state; its cards move to NEW with reason state_rename",
		Long: `Rename the state OLD to NEW. NEW takes OLD's place and flags in the stored
board definition, which every agent sharing the store reads. While the
cards move, OLD is "retiring": no card may enter it. Each card moves with
reason state_rename, one event per card, launching nothing. An interrupted
rename is finished by running it again.

` + sweepHelp,
		Args: exactArgs(2, "OLD", "NEW"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSweep(cmd, env, so, func(ctx context.Context, c *client.Client, o client.SweepOptions) (board.SweepReport, error) {
				return c.RenameState(ctx, args[0], args[1], o)
			})
		},
	}
	var into string
	del := &cobra.Command{
		Use:   "delete S --into T",
		Short: "Delete a state, moving its cards into T with reason state_delete",
		Long: `Delete the state S from the board, moving its cards into T with reason
state_delete. Moving cards out of a terminal state into a working one is a
bulk reopen: it is refused, changing nothing, while any of those cards has a
dependent (a card that names it in depends-on) outside waiting_deps, even a
finished one; move or reopen such dependents into waiting_deps first.
Moving cards into a completion state from a state that is not one is
refused too: a sweep promotes nobody, so it must not complete anything.

` + sweepHelp,
		Args: exactArgs(1, "S"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if into == "" {
				return usageError("--into is required: the state that receives %s's cards", args[0])
			}
			return runSweep(cmd, env, so, func(ctx context.Context, c *client.Client, o client.SweepOptions) (board.SweepReport, error) {
				return c.DeleteState(ctx, args[0], into, o)
			})
		},
	}
	del.Flags().StringVar(&into, "into", "", "the state that receives the deleted state's cards (required)")
	for _, sc := range []*cobra.Command{rename, del} {
		so.addFlags(sc)
	}
	c.AddCommand(rename, del)
	return c
}

func newBoardLabelCmd(env *cli) *cobra.Command {
	c := &cobra.Command{
		Use:   "label",
		Short: "Rename, merge or delete a label on every card (operator)",
		Args:  subcommandArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return withCode(exitUsage, cmd.Help()) },
	}
	var so sweepOpts
	rename := &cobra.Command{
		Use:   "rename OLD NEW",
		Short: "Rename a label on every card (reason field_rename)",
		Long:  "Rename the label OLD to NEW on every card; a card that has both keeps NEW once.\n\n" + sweepHelp,
		Args:  exactArgs(2, "OLD", "NEW"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSweep(cmd, env, so, func(ctx context.Context, c *client.Client, o client.SweepOptions) (board.SweepReport, error) {
				return c.RenameLabel(ctx, args[0], args[1], o)
			})
		},
	}
	var into string
	merge := &cobra.Command{
		Use:   "merge A B... --into C",
		Short: "Replace labels A, B... by C on every card (reason field_rename)",
		Long:  "Replace each of the labels A, B... by C on every card, where the first of them stood.\n\n" + sweepHelp,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError("want at least one label to merge")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if into == "" {
				return usageError("--into is required: the label that replaces %s", strings.Join(args, ", "))
			}
			return runSweep(cmd, env, so, func(ctx context.Context, c *client.Client, o client.SweepOptions) (board.SweepReport, error) {
				return c.MergeLabels(ctx, args, into, o)
			})
		},
	}
	merge.Flags().StringVar(&into, "into", "", "the label that replaces the merged ones (required)")
	del := &cobra.Command{
		Use:   "delete L",
		Short: "Remove a label from every card (reason field_delete)",
		Long:  "Remove the label L from every card.\n\n" + sweepHelp,
		Args:  exactArgs(1, "L"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSweep(cmd, env, so, func(ctx context.Context, c *client.Client, o client.SweepOptions) (board.SweepReport, error) {
				return c.DeleteLabel(ctx, args[0], o)
			})
		},
	}
	for _, sc := range []*cobra.Command{rename, merge, del} {
		so.addFlags(sc)
	}
	c.AddCommand(rename, merge, del)
	return c
}

// sweepOpts are the flags every sweep command takes.
type sweepOpts struct {
	json     bool
	dryRun   bool
	progress bool
}

func (o *sweepOpts) addFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.json, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "decide and write nothing: print the cards the command would change")
	cmd.Flags().BoolVar(&o.progress, "progress", false, "print the walk's progress on stderr (default: when stderr is a terminal)")
}

// runSweep runs one operation and prints its report. Contended cards make
// the command fail (exit 1) after the report is printed: the walk is not
// finished until a re-run picks them up. Progress goes to stderr, every
// 100 cards and at the last, when --progress says so or, without it, when
// stderr is a terminal.
func runSweep(cmd *cobra.Command, env *cli, o sweepOpts, op func(ctx context.Context, c *client.Client, o client.SweepOptions) (board.SweepReport, error)) error {
	c := env.client()
	opts := client.SweepOptions{DryRun: o.dryRun}
	show := o.progress
	if !cmd.Flags().Changed("progress") {
		show = isTerminal(env.stderr)
	}
	if show {
		opts.Progress = func(p apitype.SweepProgress) {
			fmt.Fprintf(env.stderr, "%s: %d of %d card(s)\n", cmd.CommandPath(), p.Done, p.Total)
		}
	}
	rep, err := op(cmd.Context(), c, opts)
	if err != nil {
		return env.agentError(c, err)
	}
	if o.json {
		if err := printJSON(env.stdout, rep); err != nil {
			return err
		}
	} else {
		printSweep(env, rep)
	}
	if len(rep.Contended) > 0 {
		return fmt.Errorf("%s: %d card(s) still contended (%s); run the command again", rep.Op, len(rep.Contended), strings.Join(rep.Contended, ", "))
	}
	return nil
}

// isTerminal says whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func printSweep(env *cli, rep board.SweepReport) {
	w := env.stdout
	if rep.DryRun {
		fmt.Fprintf(w, "%s (dry run: nothing written): %d card(s) examined\n", rep.Op, rep.Cards)
		fmt.Fprintf(w, "  would change: %d%s\n", len(rep.Changed), list(rep.Changed))
		fmt.Fprintf(w, "  unchanged:    %d\n", rep.Unchanged)
		if rep.Board != nil {
			fmt.Fprintf(w, "board afterwards: %s\n", rep.Board)
		}
		for _, n := range rep.Notes {
			fmt.Fprintf(w, "note: %s\n", n)
		}
		return
	}
	fmt.Fprintf(w, "%s: %d card(s) examined\n", rep.Op, rep.Cards)
	fmt.Fprintf(w, "  changed:   %d%s\n", len(rep.Changed), list(rep.Changed))
	fmt.Fprintf(w, "  unchanged: %d\n", rep.Unchanged)
	if len(rep.Gone) > 0 {
		fmt.Fprintf(w, "  gone:      %d%s\n", len(rep.Gone), list(rep.Gone))
	}
	fmt.Fprintf(w, "  contended: %d%s\n", len(rep.Contended), list(rep.Contended))
	if rep.Board != nil {
		fmt.Fprintf(w, "board: %s\n", rep.Board)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// list renders ids after a count, capped so a big sweep stays readable.
func list(ids []string) string {
	const max = 20
	if len(ids) == 0 {
		return ""
	}
	if len(ids) > max {
		return fmt.Sprintf(" (%s, and %d more)", strings.Join(ids[:max], ", "), len(ids)-max)
	}
	return " (" + strings.Join(ids, ", ") + ")"
}

// newBoardRetryCmd sets the board's default retry policy
// (DESIGN.md#retries): one write of the stored definition, no sweep.
func newBoardRetryCmd(env *cli) *cobra.Command {
	var (
		p      board.RetryPolicy
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "retry [--max-attempts N] [--backoff D] [--backoff-max D] [--json]",
		Short: "Set the board's default retry policy (operator)",
		Long: `Set the board's default retry policy: how many runs a card may start
before a crash (an orphaned run, a command killed by a signal) stops
returning it to the pool (and, on MongoDB, before a resumable failure
files it to blocked: the run ceiling), and how long the pool passes over a
card after a crash (doubling per attempt, at most --backoff-max). A flag
left out takes the default (20 attempts, 10s, 10m). A card's own policy
(card create --max-attempts ...) wins over the board's. The cards are not
rewritten: each follows the policy when a run of it ends.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := p.Validate(); err != nil {
				return usageError("%v", err)
			}
			c := env.client()
			b, err := c.SetBoardRetry(cmd.Context(), p)
			if err != nil {
				return env.agentError(c, err)
			}
			if asJSON {
				return printJSON(env.stdout, b.Retry)
			}
			fmt.Fprintf(env.stdout, "board retry policy: %s\n", b.RetryFor(board.Card{}))
			return nil
		},
	}
	c.Flags().IntVar(&p.MaxAttempts, "max-attempts", 0, "runs a card may start before its failures stop returning it to the pool (0: the default, 20)")
	c.Flags().DurationVar(&p.Backoff, "backoff", 0, "how long the pool passes over a card after its first crash, doubling per attempt (0: the default, 10s)")
	c.Flags().DurationVar(&p.BackoffMax, "backoff-max", 0, "the longest backoff (0: the default, 10m)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the board's policy as JSON")
	return c
}
