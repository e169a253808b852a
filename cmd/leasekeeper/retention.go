package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
)

// The retention commands: `card delete` and `prune` (DESIGN.md#retention).

func newCardDeleteCmd(env *cli) *cobra.Command {
	var force, asJSON bool
	c := &cobra.Command{
		Use:   "delete ID [--force]",
		Short: "Delete a card and its runs (operator)",
		Long: `Delete a card, its runs and its pending events; a card_deleted event
records who did it. A claimed card is refused: release it first, or pass
--force, which force-releases it exactly as card release --force does (its
holder is told, and its later writes are refused by the fence) and then
deletes it. A card that other cards name among their blockers is refused.`,
		Args: exactArgs(1, "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCardDelete(cmd.Context(), env, args[0], force, asJSON)
		},
	}
	c.Flags().BoolVar(&force, "force", false, "force-release a claimed card first")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func runCardDelete(ctx context.Context, env *cli, id string, force, asJSON bool) error {
	c := env.client()
	res, err := c.DeleteCard(ctx, id, force)
	if err != nil {
		return env.agentError(c, err)
	}
	if asJSON {
		return printJSON(env.stdout, res)
	}
	if res.Holder != "" {
		fmt.Fprintf(env.stdout, "released %s from %s (epoch %d); its holder is told and its later writes are refused\n", id, res.Holder, res.Epoch)
	}
	fmt.Fprintf(env.stdout, "deleted %s (%s) and %d run(s)\n", res.Card.ID, res.Card.State, res.Runs)
	return nil
}

type pruneOpts struct {
	olderThan time.Duration
	limit     int
	dryRun    bool
	json      bool
}

func newPruneCmd(env *cli) *cobra.Command {
	var o pruneOpts
	c := &cobra.Command{
		Use:   "prune [--older-than D] [--dry-run]",
		Short: "Delete old runs of finished cards and old events now (operator)",
		Long: `Delete, now, what the agent's retention deletes in the background: the
runs of finished cards (in a terminal state, unclaimed) and the events
older than --older-than (default: the agent's retention.age), by the
store's clock. Events the agent's effects layer has not applied are kept.
Cards stay; a card goes only with card delete. Deletes go in bounded steps
of --limit runs and --limit events until nothing older is left; with
--dry-run nothing is deleted and the first step's worth is printed.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return runPrune(cmd.Context(), env, o) },
	}
	c.Flags().DurationVar(&o.olderThan, "older-than", 0, "prune what is older than this (default: the agent's retention.age)")
	c.Flags().IntVar(&o.limit, "limit", board.DefaultPruneLimit, fmt.Sprintf("runs and events per step, 1..%d", board.MaxPruneLimit))
	c.Flags().BoolVar(&o.dryRun, "dry-run", false, "print what would be deleted, delete nothing")
	c.Flags().BoolVar(&o.json, "json", false, "print JSON (one object per step)")
	return c
}

func runPrune(ctx context.Context, env *cli, o pruneOpts) error {
	if o.olderThan < 0 {
		return usageError("--older-than %s is negative", o.olderThan)
	}
	if o.limit < 1 || o.limit > board.MaxPruneLimit {
		return usageError("--limit %d is out of range 1..%d", o.limit, board.MaxPruneLimit)
	}
	c := env.client()
	req := apitype.PruneRequest{OlderThanMS: o.olderThan.Milliseconds(), Limit: o.limit, DryRun: o.dryRun}
	total := apitype.PruneResponse{Cards: []string{}, DryRun: o.dryRun}
	for {
		res, err := c.Prune(ctx, req)
		if err != nil {
			return env.agentError(c, err)
		}
		if o.json {
			if err := printJSONLine(env, res); err != nil {
				return err
			}
		}
		total.Before = res.Before
		total.Runs += res.Runs
		total.Events += res.Events
		total.Cards = append(total.Cards, res.Cards...)
		total.EventsThrough = max(total.EventsThrough, res.EventsThrough)
		total.More = res.More
		// A dry run deletes nothing, so a second step would say the same.
		if o.dryRun || !res.More || res.Runs+res.Events == 0 {
			break
		}
	}
	if o.json {
		return nil
	}
	verb, more := "pruned", ""
	if o.dryRun {
		verb = "would prune"
		if total.More {
			more = fmt.Sprintf(" (the first step of %d; more would follow)", o.limit)
		}
	}
	fmt.Fprintf(env.stdout, "%s %d run(s) of %d finished card(s) and %d event(s) older than %s%s\n",
		verb, total.Runs, len(total.Cards), total.Events, total.Before.Format(time.RFC3339), more)
	if len(total.Cards) > 0 {
		fmt.Fprintf(env.stdout, "cards: %s\n", strings.Join(total.Cards, " "))
	}
	if total.EventsThrough > 0 {
		fmt.Fprintf(env.stdout, "events through seq %d\n", total.EventsThrough)
	}
	return nil
}
