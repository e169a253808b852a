package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leasekeeper/leasekeeper/agent"
	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
)

type agentOpts struct {
	config    string
	logFormat string
}

type eventsOpts struct {
	follow bool
	out    outputOpts
	after  int64
	card   string
	types  []string
	since  string
}

// eventTypes are the types `events --type` accepts.
var eventTypes = []board.EventType{
	board.EventCardCreated, board.EventClaimed, board.EventReleased, board.EventState,
	board.EventLabels, board.EventLastRun, board.EventAwaitingInput, board.EventGaveUp,
	board.EventRunCreated, board.EventRunUpdated, board.EventCardDeleted,
}

// eventFilter is what `events --card/--type/--since` keep. The agent's log
// API has no such filter: it is applied here, on every event read or
// streamed (the position to resume from still advances past the rest).
type eventFilter struct {
	card  string
	types map[board.EventType]bool // empty: every type
	since time.Time                // zero: from the start
}

func newEventFilter(o eventsOpts, now time.Time) (eventFilter, error) {
	f := eventFilter{card: o.card, types: map[board.EventType]bool{}}
	for _, t := range o.types {
		if !slices.Contains(eventTypes, board.EventType(t)) {
			names := make([]string, len(eventTypes))
			for i, et := range eventTypes {
				names[i] = string(et)
			}
			return f, usageError("--type %q: want one of %s", t, strings.Join(names, ", "))
		}
		f.types[board.EventType(t)] = true
	}
	if o.since != "" {
		if d, err := time.ParseDuration(o.since); err == nil {
			if d < 0 {
				return f, usageError("--since %s: want a duration of 0 or more, or an RFC 3339 time", o.since)
			}
			f.since = now.Add(-d)
		} else if t, err := time.Parse(time.RFC3339Nano, o.since); err == nil {
			f.since = t
		} else {
			return f, usageError("--since %q: want a duration (90s, 2h) or an RFC 3339 time (2026-01-02T15:04:05Z)", o.since)
		}
	}
	return f, nil
}

func (f eventFilter) keep(ev board.Event) bool {
	return (f.card == "" || ev.Card == f.card) &&
		(len(f.types) == 0 || f.types[ev.Type]) &&
		(f.since.IsZero() || !ev.At.Before(f.since))
}

type reaperOpts struct {
	dryRun bool
	json   bool
}

func runAgent(ctx context.Context, env *cli, o agentOpts) error {
	e := agent.DefaultEnvironment()
	e.Socket = env.socket // --socket: the socket to serve, over the config's
	if o.config == "" {
		o.config = e.DefaultConfigPath()
	}
	cfg, err := agent.LoadConfig(o.config, e)
	if err != nil {
		return err
	}
	opts := agent.Options{
		ConfigPath:    o.config,
		Env:           e,
		LogFormat:     o.logFormat,
		LogOutput:     env.stderr,
		Version:       buildVersion(),
		PluginCommand: pluginCommand(),
	}
	return agent.Run(ctx, cfg, opts)
}

// pluginCommand is the argv that re-executes this binary as the built-in
// store plugin; nil when the binary cannot name itself.
func pluginCommand() []string {
	self, err := os.Executable()
	if err != nil {
		return nil
	}
	return []string{self, pluginCmdName}
}

func runStatus(ctx context.Context, env *cli, out outputOpts) error {
	format, err := out.resolve()
	if err != nil {
		return err
	}
	c := env.client()
	st, err := c.Status(ctx)
	if err != nil {
		return env.agentError(c, err)
	}
	if done, err := printOutput(env.stdout, format, st); done {
		return err
	}
	// wide: the same text; it shows every field.
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "agent:\t%s (pid %d, %s)\n", st.Marker, st.PID, st.Version)
	fmt.Fprintf(tw, "started:\t%s\n", st.StartedAt.Format(time.RFC3339))
	fmt.Fprintf(tw, "socket:\t%s\n", st.Socket)
	fmt.Fprintf(tw, "store:\t%s\n", st.Backend)
	if st.Backend.Path != "" {
		fmt.Fprintf(tw, "board file:\t%s\n", st.Backend.Path)
	}
	if st.Store.Reachable {
		fmt.Fprintf(tw, "store reachable:\tyes (%.1fms)\n", st.Store.CheckMS)
	} else {
		fmt.Fprintf(tw, "store reachable:\tNO: %s\n", st.Store.Error)
	}
	if w := st.Store.LastWrite; w != nil {
		if w.OK {
			fmt.Fprintf(tw, "last store write:\tok (%s at %s)\n", w.Op, w.At.Format(time.RFC3339))
		} else {
			fmt.Fprintf(tw, "last store write:\tFAILED (%s at %s): %s\n", w.Op, w.At.Format(time.RFC3339), w.Error)
		}
	}
	if p := st.Store.Plugin; p != nil {
		line := fmt.Sprintf("%s, pid %d, %d restarts, since %s", p.State, p.PID, p.Restarts, p.Since.Format(time.RFC3339))
		if p.LastError != "" {
			line += ", last error: " + p.LastError
		}
		fmt.Fprintf(tw, "store plugin:\t%s\n", line)
	}
	fmt.Fprintf(tw, "lease:\t%s (liveness %s)\n", ms(st.LeaseMS), st.Liveness)
	gate := "off"
	if st.Reaper.Enabled {
		gate = "on"
	}
	fmt.Fprintf(tw, "reaper:\tgate %s, every %s, batch %d\n", gate, ms(st.Reaper.IntervalMS), st.Reaper.Batch)
	if p := st.Reaper.LastPass; p != nil {
		fmt.Fprintf(tw, "last reaper pass:\t%s\n", describePass(*p))
	} else {
		fmt.Fprintf(tw, "last reaper pass:\tnone yet\n")
	}
	fmt.Fprintf(tw, "heartbeat:\tevery %s\n", ms(st.Heartbeat.IntervalMS))
	if t := st.Heartbeat.LastTick; t != nil {
		line := fmt.Sprintf("%s ago, %s in %.1fms: %d held, %d renewed, %d lost",
			ms(t.AgoMS), t.Result, t.DurationMS, t.Held, t.Renewed, t.Lost)
		if t.Error != "" {
			line += ", error: " + t.Error
		}
		fmt.Fprintf(tw, "last tick:\t%s\n", line)
	} else {
		fmt.Fprintf(tw, "last tick:\tnone yet\n")
	}
	if st.Draining {
		fmt.Fprintf(tw, "draining:\tyes (not granting new claims)\n")
	}
	fmt.Fprintf(tw, "claims held:\t%d\n", len(st.Claims))
	_ = tw.Flush()
	if len(st.Claims) > 0 {
		tw = tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  CARD\tMARKER\tEPOCH\tPID\tTRUSTED")
		for _, h := range st.Claims {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\n", h.Card, h.Marker, h.Epoch, h.PID, ms(h.TrustedMS))
		}
		_ = tw.Flush()
	}
	return nil
}

// describePass summarises a reaper pass on one line: when, how long, and
// what it decided, counted by action.
func describePass(p apitype.ReaperPass) string {
	s := fmt.Sprintf("%s, took %.1fms, %d examined", p.StartedAt.Format(time.RFC3339), p.DurationMS, p.Examined)
	if p.Gated {
		s += " (gate off: repair sweeps only)"
	}
	if p.Reapers > 1 {
		s += fmt.Sprintf(" (its share among %d reapers)", p.Reapers)
	}
	if p.ClockWaitMS > 0 && !p.Gated {
		s += fmt.Sprintf(" (store clock not trusted yet for %s: only dead pids decided)", time.Duration(p.ClockWaitMS*float64(time.Millisecond)).Round(time.Second))
	}
	if counts := formatCounts(p.Actions); counts != "" {
		s += "; decided " + counts
	}
	if counts := formatCounts(p.Sweeps); counts != "" {
		s += "; swept " + counts
	}
	return s
}

// formatCounts prints a count map in a stable order: "fail 1, keep 3".
func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// healthTimeout bounds a health check: a container runtime kills a check
// that hangs, and a hung agent is exactly what it must report.
const healthTimeout = 5 * time.Second

// runHealth is the container and script probe: exit 0 when the agent
// answers and is fit to serve, 1 with a one-line reason otherwise.
func runHealth(ctx context.Context, env *cli) error {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	c := env.client()
	st, err := c.Status(ctx)
	if err != nil {
		return oneLine(env.agentError(c, err))
	}
	if why := st.Unhealthy(); why != "" {
		return oneLine(errors.New(why))
	}
	fmt.Fprintln(env.stdout, "ok")
	return nil
}

// oneLine keeps a health failure to one line on stderr, as probes log it.
func oneLine(err error) error {
	msg := err.Error()
	if !strings.ContainsAny(msg, "\r\n") {
		return err
	}
	return errors.New(strings.Join(strings.Fields(msg), " "))
}

func runEvents(ctx context.Context, env *cli, o eventsOpts) error {
	format, err := o.out.resolve()
	if err != nil {
		return err
	}
	filter, err := newEventFilter(o, time.Now())
	if err != nil {
		return err
	}
	c := env.client()
	print := func(ev board.Event) error {
		if !filter.keep(ev) {
			return nil
		}
		switch format {
		case outputJSON:
			return printJSONLine(env, ev)
		case outputYAML:
			// One YAML document per event, so a stream (--follow) parses
			// as it comes.
			if _, err := io.WriteString(env.stdout, "---\n"); err != nil {
				return err
			}
			return printYAML(env.stdout, ev)
		}
		_, err := fmt.Fprintln(env.stdout, formatEvent(ev)) // wide: the same line
		return err
	}
	after := o.after
	if !o.follow {
		for {
			evs, err := c.Events(ctx, after, 500)
			if err != nil {
				return env.agentError(c, err)
			}
			for _, ev := range evs {
				if err := print(ev); err != nil {
					return err
				}
				after = ev.Seq
			}
			if len(evs) == 0 {
				return nil
			}
		}
	}
	return followEvents(ctx, env, c, after, print) // follow.go
}

func printJSONLine(env *cli, v any) error {
	return json.NewEncoder(env.stdout).Encode(v)
}

// eventTimeLayout prints an event's time in UTC to the microsecond, every
// digit kept, so the columns after it line up.
const eventTimeLayout = "2006-01-02T15:04:05.000000Z07:00"

func formatEvent(ev board.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%6d  %s  %-14s %s", ev.Seq, ev.At.UTC().Format(eventTimeLayout), ev.Type, ev.Card)
	d := ev.Data
	switch ev.Type {
	case board.EventState:
		fmt.Fprintf(&b, " %s -> %s", d.From, d.To)
	case board.EventClaimed, board.EventReleased:
		fmt.Fprintf(&b, " %s epoch %d", d.Marker, d.Epoch)
	case board.EventLabels:
		for _, l := range d.Added {
			fmt.Fprintf(&b, " +%s", l)
		}
		for _, l := range d.Removed {
			fmt.Fprintf(&b, " -%s", l)
		}
		fmt.Fprintf(&b, " [%s]", strings.Join(d.Labels, ","))
	case board.EventRunCreated, board.EventRunUpdated, board.EventLastRun:
		fmt.Fprintf(&b, " run %s %s", d.RunID, d.Status)
	case board.EventCardDeleted:
		fmt.Fprintf(&b, " from %s", d.From)
	}
	if ev.Reason != "" {
		fmt.Fprintf(&b, " reason=%s", ev.Reason)
	}
	if ev.Actor != "" {
		fmt.Fprintf(&b, " by %s", ev.Actor)
	}
	return b.String()
}

func runReaperPass(ctx context.Context, env *cli, o reaperOpts) error {
	c := env.client()
	pass, err := c.ReaperPass(ctx, o.dryRun)
	if err != nil {
		return env.agentError(c, err)
	}
	if o.json {
		return printJSON(env.stdout, pass)
	}
	mode := "pass"
	if pass.DryRun {
		mode = "dry run"
	}
	gate := ""
	switch {
	case pass.Gated && pass.DryRun:
		gate = " (gate off: what the gate would decide, and the repair sweeps)"
	case pass.Gated:
		gate = " (gate off: repair sweeps only, no decisions)"
	case pass.ClockWaitMS > 0 && !pass.DryRun:
		gate = fmt.Sprintf(" (the store's clock is not trusted for another %s: only cards whose worker's pid is gone were decided)", time.Duration(pass.ClockWaitMS*float64(time.Millisecond)).Round(time.Second))
	}
	share := ""
	if pass.Reapers > 1 {
		share = fmt.Sprintf(" (its share among %d reapers)", pass.Reapers)
	}
	fmt.Fprintf(env.stdout, "reaper %s at %s: %d examined%s%s\n", mode, pass.StartedAt.Format(time.RFC3339), pass.Examined, share, gate)
	printDecisions(env, pass.Decisions)
	return nil
}

func printDecisions(env *cli, ds []apitype.ReaperDecision) {
	if len(ds) == 0 {
		return
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CARD\tPREV\tACTION\tAPPLIED\tREASON")
	for _, d := range ds {
		reason := d.Reason
		if d.Error != "" {
			reason += " error: " + d.Error
		}
		fmt.Fprintf(tw, "  %s\t%s@%d\t%s\t%v\t%s\n", d.Card, d.PrevHolder, d.PrevEpoch, d.Action, d.Applied, reason)
	}
	_ = tw.Flush()
}

func runBoardShow(ctx context.Context, env *cli, out outputOpts) error {
	format, err := out.resolve()
	if err != nil {
		return err
	}
	c := env.client()
	b, err := c.Board(ctx)
	if err != nil {
		return env.agentError(c, err)
	}
	resp := apitype.BoardOf(b)
	if done, err := printOutput(env.stdout, format, resp); done {
		return err
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tFLAGS")
	for _, s := range resp.States {
		var flags []string
		for _, f := range []struct {
			on   bool
			name string
		}{{s.Pool, "pool"}, {s.Launch, "launch"}, {s.Running, "running"}, {s.Terminal, "terminal"}, {s.Completion, "completion"}} {
			if f.on {
				flags = append(flags, f.name)
			}
		}
		if s.RetiringInto != "" {
			flags = append(flags, "retiring into "+s.RetiringInto) // a state sweep is moving its cards
		}
		fmt.Fprintf(tw, "%s\t%s\n", s.Name, strings.Join(flags, " "))
	}
	_ = tw.Flush()
	failed := resp.Failed
	if failed == "" {
		failed = "(none)"
	}
	fmt.Fprintf(env.stdout, "\nrunning: %s  first pool: %s  completion: %s  failed: %s\n",
		resp.Running, resp.FirstPool, resp.Completion, failed)
	// DESIGN.md#retries: the board's default, as cards without their own follow it.
	fmt.Fprintf(env.stdout, "retry: %s\n", b.RetryFor(board.Card{}))
	return nil
}
