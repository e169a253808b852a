// Command leasekeeper is the claim-lease sidecar agent and its operator and
// worker command line. This file only parses flags and wires the commands
// to their implementations in the other files of the package.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/agent"
	"github.com/leasekeeper/leasekeeper/agent/supervise"
	"github.com/leasekeeper/leasekeeper/board"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes one command line and returns the process exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first SIGINT/SIGTERM cancels the command's context. `claim`
	// subscribes to the signals as well, forwards them to CMD and detaches
	// its own store calls from that cancellation.
	env := &cli{stdin: stdin, stdout: stdout, stderr: stderr, args: args}
	root := newRoot(env)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "leasekeeper: %v\n", err)
		if code := exitCodeOf(err); code == exitUsage || code == claimExitUsage {
			// The help of the command that refused the invocation (cobra
			// returns the deepest one it found), not the root's.
			path := root.CommandPath()
			if cmd != nil {
				path = cmd.CommandPath()
			}
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", path)
		}
	}
	return exitCodeOf(err)
}

// cli is what every command shares: the I/O streams and the socket flag.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	socket         string
	args           []string // the command line as given, for completions
}

func newRoot(env *cli) *cobra.Command {
	root := &cobra.Command{
		Use:   "leasekeeper",
		Short: "Claim-lease sidecar: fenced claims on board cards for worker fleets",
		Long: `leasekeeper grants workers fenced, leased claims on the cards of a board,
renews them while the worker lives, tells a worker the moment its claim is
lost, and reaps the claims of dead workers.

Client commands find the agent through --socket, else LEASEKEEPER_SOCKET,
else $XDG_RUNTIME_DIR/leasekeeper/leasekeeper.sock (./leasekeeper.sock when
XDG_RUNTIME_DIR is unset).

` + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion(),
		// An argument that names no command is a usage error (exit 2);
		// with none, the help.
		Args: subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetVersionTemplate("leasekeeper {{.Version}}\n")
	root.PersistentFlags().StringVar(&env.socket, "socket", "", "agent socket path (default: LEASEKEEPER_SOCKET or the runtime directory)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return withCode(exitUsage, err) })
	root.CompletionOptions.DisableDefaultCmd = true

	root.AddCommand(
		newAgentCmd(env),
		newCardCmd(env),
		newRunCmd(env), // run.go
		newBoardCmd(env),
		newClaimCmd(env),
		newStatusCmd(env),
		newHealthCmd(env),
		newEventsCmd(env),
		newReaperCmd(env),
		newPruneCmd(env),      // retention.go
		newUICmd(env),         // ui.go
		newCompletionCmd(env), // completion.go
		newPluginCmd(env),
		newStoreCmd(), // store.go
		newSupervisorCmd(),
		newVersionCmd(env), // version.go
		newManCmd(),        // man.go
	)
	addAgentCompletions(env, root) // completion.go
	return root
}

// exactArgs is cobra.ExactArgs with the usage exit code and a message that
// names what the command wants.
func exactArgs(n int, names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == n {
			return nil
		}
		got := "none"
		if len(args) > 0 {
			got = fmt.Sprintf("%d (%s)", len(args), strings.Join(quoteAll(args), " "))
		}
		if n == 0 {
			return usageError("%s takes no arguments, got %s", cmd.CommandPath(), got)
		}
		return usageError("%s needs %s, got %s", cmd.CommandPath(), strings.Join(names, " "), got)
	}
}

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = fmt.Sprintf("%q", a)
	}
	return out
}

// subcommandArgs is the Args of a command that only groups subcommands:
// an argument is a subcommand that does not exist.
func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return usageError("%s", msg)
}

func newAgentCmd(env *cli) *cobra.Command {
	var o agentOpts
	c := &cobra.Command{
		Use:   "agent [--config FILE]",
		Short: "Run the agent (the daemon)",
		Long: `Run the agent: open the store, sweep the claims of dead workers of this
host, adopt the claims of live ones, then serve the socket, renew claims
and run the reaper until SIGTERM or SIGINT.

With no --config every key takes its default: the socket under
$XDG_RUNTIME_DIR/leasekeeper (or the working directory), a bbolt store in
persistent state under $XDG_STATE_HOME/leasekeeper (or
~/.local/state/leasekeeper; under systemd the unit's runtime and state
directories, and agent.yaml in its configuration directory when present),
lease 30s, liveness pid, reaper on. A bbolt file on a tmpfs is refused
unless store.allow_tmpfs is true. The startup log and status name the file.
LEASEKEEPER_REAPER overrides reaper.enabled (LEASEKEEPER_REAPER=0 is the
watchdog's kill switch); --socket overrides socket.
The config file is watched: ` + strings.Join(agent.LiveKeys, ", ") + ` reload
live; other keys need a restart.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return runAgent(cmd.Context(), env, o) },
	}
	c.Flags().StringVar(&o.config, "config", "", "YAML config file (strict: unknown keys are errors)")
	c.Flags().StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	return c
}

func newCardCmd(env *cli) *cobra.Command {
	c := &cobra.Command{
		Use:   "card",
		Short: "Create, list, show and move cards (operator verbs)",
		Args:  subcommandArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return withCode(exitUsage, cmd.Help()) },
	}

	var create cardCreateOpts
	cc := &cobra.Command{
		Use:   "create ID [--title T] [--state S] [--depends-on A,B] [--label L]... [--max-attempts N] [--backoff D] [--backoff-max D]",
		Short: "Create a card",
		Long: `Create a card. Without --state it lands in the first pool state, or in
waiting_deps while one of its --depends-on blockers is not complete.

--max-attempts, --backoff and --backoff-max give the card a retry policy of
its own, over the board's: how many runs it may start before a crash (or, on
MongoDB, a resumable failure) stops returning it to the pool, and how long
the pool passes over it after a crash (doubling per attempt, at most
--backoff-max). A flag left out takes the board's value (docs/DESIGN.md#retries).`,
		Args: exactArgs(1, "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			create.id = args[0]
			return runCardCreate(cmd.Context(), env, create)
		},
	}
	cc.Flags().StringVar(&create.title, "title", "", "card title")
	cc.Flags().StringVar(&create.state, "state", "", "initial state")
	cc.Flags().StringSliceVar(&create.dependsOn, "depends-on", nil, "blocker card ids, comma separated")
	cc.Flags().StringArrayVar(&create.labels, "label", nil, "label (repeatable)")
	cc.Flags().BoolVar(&create.json, "json", false, "print the card as JSON")
	cc.Flags().IntVar(&create.retry.MaxAttempts, "max-attempts", 0, "runs the card may start before its failures stop returning it to the pool (0: the board's)")
	cc.Flags().DurationVar(&create.retry.Backoff, "backoff", 0, "how long the pool passes over the card after its first crash, doubling per attempt (0: the board's)")
	cc.Flags().DurationVar(&create.retry.BackoffMax, "backoff-max", 0, "the longest backoff (0: the board's)")

	var ls cardListOpts
	cl := &cobra.Command{
		Use:   "ls [--state S] [--label L]... [--claimed] [--limit N] [-o json|yaml|wide]",
		Short: "List cards, oldest first",
		Long: `List cards, oldest first: id, state, holder (- when free), claim epoch,
labels, blockers (DEPS, - when none) and title, cut to 40 display cells.

--state, --claimed and --limit are served by the agent. --label is not: the
agent returns the cards the other filters select and ls keeps those that
carry every --label given; --limit then counts those cards.

-o json (or --json) prints one array of cards, -o yaml the same in YAML;
-o wide adds the lease's end, the last run and the last update, and shows
whole titles.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return runCardList(cmd.Context(), env, ls) },
	}
	cl.Flags().StringVar(&ls.state, "state", "", "only cards in this state")
	cl.Flags().StringArrayVar(&ls.labels, "label", nil, "only cards carrying this label (repeatable: all of them; filtered by ls, not the agent)")
	cl.Flags().BoolVar(&ls.claimed, "claimed", false, "only claimed cards")
	cl.Flags().IntVar(&ls.limit, "limit", 0, "at most N cards (0: no limit)")
	addOutputFlags(cl, &ls.out, "wide: lease end, last run, last update, whole titles")

	var show cardShowOpts
	cs := &cobra.Command{
		Use:   "show ID [-o json|yaml|wide]",
		Short: "Show one card",
		Args:  exactArgs(1, "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			show.id = args[0]
			return runCardShow(cmd.Context(), env, show)
		},
	}
	addOutputFlags(cs, &show.out, "wide: as the default, which shows every field")

	cm := &cobra.Command{
		Use:   "move ID STATE",
		Short: "Move a card (operator); refused out of a terminal state",
		Long: `Move a card to another state as an operator. Terminal states (done, failed,
blocked, cancelled on the default board) are sinks: moving out of one is
refused; use 'leasekeeper card reopen' instead. Moving between terminal
states is an ordinary refiling.`,
		Args: exactArgs(2, "ID", "STATE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCardMove(cmd.Context(), env, args[0], args[1])
		},
	}

	cr := &cobra.Command{
		Use:   "reopen ID STATE",
		Short: "Reopen a card from a terminal state into a working state",
		Long: `Reopen is the only exit from a terminal state. STATE must be a working
(non-terminal) state. It is refused while any card that names this one in
its depends-on is outside waiting_deps (whichever blocker promoted it, and
even once it has finished): move or reopen that dependent into waiting_deps
first.`,
		Args: exactArgs(2, "ID", "STATE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCardReopen(cmd.Context(), env, args[0], args[1])
		},
	}

	var label cardLabelOpts
	clb := &cobra.Command{
		Use:   "label ID [--add L]... [--remove L]... | --set L1,L2",
		Short: "Edit a card's labels",
		Long: `Edit labels. --add/--remove are relative and applied in one atomic step
(removes win); --set replaces the whole set (and so may re-arm a one-shot
label). --set cannot be combined with --add or --remove.`,
		Args: exactArgs(1, "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			label.id = args[0]
			label.setGiven = cmd.Flags().Changed("set")
			return runCardLabel(cmd.Context(), env, label)
		},
	}
	clb.Flags().StringArrayVar(&label.add, "add", nil, "label to add (repeatable)")
	clb.Flags().StringArrayVar(&label.remove, "remove", nil, "label to remove (repeatable)")
	clb.Flags().StringSliceVar(&label.set, "set", nil, "replace the labels with this comma-separated list (empty clears)")
	clb.Flags().BoolVar(&label.json, "json", false, "print the card as JSON")

	var force bool
	crl := &cobra.Command{
		Use:   "release ID --force",
		Short: "Force-release a card's claim (operator steal)",
		Long: `Release whoever holds the card. The holder's agent tells it at once
(claim_lost); its later writes are refused by the fence.`,
		Args: exactArgs(1, "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !force {
				return usageError("card release steals the claim from its holder: pass --force to confirm")
			}
			return runCardRelease(cmd.Context(), env, args[0])
		},
	}
	crl.Flags().BoolVar(&force, "force", false, "confirm the steal")

	var wait cardWaitOpts
	cw := &cobra.Command{
		Use:   "wait ID --for STATE [--timeout D]",
		Short: "Wait until a card is in a state (for scripts)",
		Long: `Wait until the card is in STATE (done, say), and exit 0: at once when it
already is. The agent's event log wakes the wait whenever the card changes
(it is not a polling loop); a re-try every 30s is the backstop for a change
no event announces. Without --timeout it waits for as long as it takes.

It gives up early, with a code of its own, when the card rests in a
terminal state other than STATE (waiting for done on a card that failed)
or when the card does not exist or is deleted.

` + cardWaitExitCodesHelp,
		Args: exactArgs(1, "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			wait.id = args[0]
			if wait.state == "" {
				return usageError("card wait needs --for STATE (done, say)")
			}
			return runCardWait(cmd.Context(), env, wait)
		},
	}
	cw.Flags().StringVar(&wait.state, "for", "", "the state to wait for (done, failed, ready, ...)")
	cw.Flags().DurationVar(&wait.timeout, "timeout", 0, "give up after this long (exit 124; 0: wait for as long as it takes)")

	c.AddCommand(cc, cl, cs, cm, cr, clb, crl, cw)
	c.AddCommand(newCardDeleteCmd(env)) // retention.go
	return c
}

func newBoardCmd(env *cli) *cobra.Command {
	c := &cobra.Command{
		Use:   "board",
		Short: "Show and administer the board the agent serves",
		Args:  subcommandArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return withCode(exitUsage, cmd.Help()) },
	}
	var out outputOpts
	show := &cobra.Command{
		Use:   "show [-o json|yaml|wide]",
		Short: "Print the board's states in order with their flags",
		Long: `Print the board's states in order with their flags (pool, launch, running,
terminal, completion) and the columns cards are routed by: the running
column, the first pool state, the completion state and the failed state.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return runBoardShow(cmd.Context(), env, out) },
	}
	addOutputFlags(show, &out, "wide: as the default, which shows every field")
	c.AddCommand(show, newBoardStateCmd(env), newBoardLabelCmd(env), newBoardRetryCmd(env)) // board.go
	return c
}

func newClaimCmd(env *cli) *cobra.Command {
	var o claimOpts
	c := &cobra.Command{
		Use:   "claim (ID | --next [--label L]...) [--wait [DURATION]] [--resumable] [--grace D] -- CMD [ARGS...]",
		Short: "Hold a claim on a card while CMD runs",
		Long: `Claim the card (or the oldest claimable one with --next), start its run and
move it into the running column, in one write, then run CMD while the agent
renews the claim. A card that records a run without a verdict (returned to
the pool, or force-released) has that run resumed: CMD sees its checkpoint
in LEASEKEEPER_CHECKPOINT (--fresh starts a new run instead). A card named
by ID may be in any working column, in the pool or not (backlog,
awaiting_input), except waiting_deps: a card waiting on its blockers is
refused, naming them, until its last blocker completes. A card in a
terminal state, or held by anyone, is refused too, and nothing is written.
With --next, each --label narrows the pick to cards carrying that label
(all of them when given several): a GPU worker runs
claim --next --label gpu -- CMD.

With --wait, a card held by someone else, waiting on its blockers or
backing off after a retryable failure (with --next: no claimable card) is
waited for instead of refused, as flock -w
and consul lock wait: for ever, or up to DURATION (--wait=10m, or --wait
10m before the ID or --). claim says on stderr what it waits for; the
agent's event log wakes it the moment a release, a move, a new card, a
label change or a blocker finishing may let it claim, with a re-try every
30s as a backstop for a change no event announces. A card that does not
exist or is in a terminal state is refused at once, waiting or not. On
timeout claim exits with the code of the refusal it waited on (3, 121,
122) and says it timed out; SIGINT or SIGTERM while it waits exits 130
(143) and claims nothing.

When CMD exits, one write records the run's verdict, files the card and
releases the claim:

  exit 0          run finished, card filed to the completion state
  non-zero        run failed, card filed to failed
  non-zero with --resumable
                  run failed_resumable, card back in the pool: released
                  where the running column is a pool state (the local
                  board: the next claim resumes the run), moved to the
                  first pool state otherwise (the fleet board); a card
                  claimed out of a state outside the pool (backlog)
                  goes back to that state

and claim exits with CMD's status.

SIGINT and SIGTERM reach CMD once each: CMD is in claim's process group
and cgroup, so a ^C at the terminal or a kill of the job or of the whole
cgroup reaches it directly, and claim passes on only what was sent to it
alone. CMD then has --grace to stop (never past the deadline the agent
vouches for) before it is killed; the card goes back to the pool (or to
the state outside the pool it was claimed from) with its run resumable,
never into a sink, and claim exits with CMD's status (128+N
if it had to be killed). If the claim is lost while
CMD runs (an operator force-release, a lapsed lease), CMD gets SIGTERM, then
SIGKILL before the lease deadline, and claim exits 4 within a bounded
time even when the agent is frozen. The verdict's write is retried, within
the trusted deadline, when its answer was lost.

However the claim ends (CMD exits, the claim is lost, claim itself is
killed, even with SIGKILL), every process CMD started is killed with it:
background jobs, processes in a session of their own, double-forked
daemons. When claim exits on its own they are already gone. CMD runs
under a supervisor, this binary re-executed, that is the child subreaper
of CMD's tree; it also kills the tree at the lease deadline claim last
confirmed if claim cannot (stopped, say), and claim then exits 4. Processes started for CMD by something outside its tree
(systemd-run, at, a container runtime) are out of its reach.

CMD sees LEASEKEEPER_CARD, LEASEKEEPER_RUN, LEASEKEEPER_MARKER,
LEASEKEEPER_EPOCH and LEASEKEEPER_CHECKPOINT in its environment. With
--resumable the run is recorded with a checkpoint, so if claim itself dies
the watchdog returns the card to the pool (failed_resumable) instead of
filing it to failed.

` + claimExitCodesHelp,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if dash < 0 || dash == len(args) {
				return claimUsage("claim needs a command after --")
			}
			o.command = args[dash:]
			// claim --wait 10s ID -- CMD: the bare flag's duration as a
			// word of its own (DESIGN.md#waiting).
			want := 1
			if o.next {
				want = 0
			}
			before := waitDurationArg(&o.wait, args[:dash], want)
			dash = len(before)
			switch {
			case o.next && dash != 0:
				return claimUsage("give either a card ID or --next, not both")
			case !o.next && len(o.labels) > 0:
				return claimUsage("--label routes --next; a card named by ID is claimed whatever its labels")
			}
			// Labels are read as a card stores them (trimmed), so
			// --label " gpu" routes to what `card create --label " gpu"`
			// labelled. An empty one is refused: dropped, it would turn
			// a GPU worker whose $LABEL came out empty into one that
			// takes any card.
			for _, l := range o.labels {
				if strings.TrimSpace(l) == "" {
					return claimUsage("--label: an empty label routes nothing (leave the flag out to take any card)")
				}
			}
			labels, err := board.NormalizeLabels(o.labels)
			if err != nil {
				return claimUsage("--label: %v", err)
			}
			o.labels = labels
			switch {
			case !o.next && dash != 1 && o.wait.set && o.wait.d == 0 && dash == 2:
				return claimUsage("give exactly one card ID (or --next) before --; a duration for --wait goes right after it (--wait 10m ID) or as --wait=10m")
			case !o.next && dash != 1:
				return claimUsage("give exactly one card ID (or --next) before --")
			case o.grace < 0:
				return claimUsage("--grace must not be negative")
			case o.heldExit < 1 || o.heldExit > 255 || o.lostExit < 1 || o.lostExit > 255:
				return claimUsage("--held-exit and --lost-exit must be between 1 and 255")
			case !o.next:
				o.card = before[0]
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return runClaim(cmd.Context(), env, o) },
	}
	c.Flags().Var(&o.wait, "wait", "wait until the card (with --next, a matching card) can be claimed: for ever, or up to DURATION (--wait=10m, or --wait 10m before the ID); woken by the agent's event log")
	c.Flags().Lookup("wait").NoOptDefVal = waitForever
	c.Flags().BoolVar(&o.next, "next", false, "claim the oldest unclaimed card in a pool state")
	c.Flags().StringArrayVar(&o.labels, "label", nil, "with --next, take only a card carrying this label (repeat for several: all must be carried)")
	c.Flags().BoolVar(&o.resumable, "resumable", false, "a failed CMD is safe to restart: return the card to the pool")
	c.Flags().BoolVar(&o.fresh, "fresh", false, "start a new run even when the card records one without a verdict")
	c.Flags().DurationVar(&o.grace, "grace", defaultGrace, "after SIGINT/SIGTERM, how long CMD has to stop before it is killed (capped by the trusted deadline)")
	c.Flags().IntVar(&o.heldExit, "held-exit", claimExitHeld, "exit code when the card is held by someone else")
	c.Flags().IntVar(&o.lostExit, "lost-exit", claimExitLost, "exit code when the claim is lost while CMD runs")
	// claim's usage errors have claim's own code: CMD's status owns 2.
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return withCode(claimExitUsage, err) })
	return c
}

func newStatusCmd(env *cli) *cobra.Command {
	var out outputOpts
	c := &cobra.Command{
		Use:   "status [-o json|yaml|wide]",
		Short: "Show the agent's status and the claims it renews",
		Long: `Show the agent's status: its store (reachable, and the plugin process:
up, restarts, last error), the reaper gate, the lease and liveness mode, the
claims it renews, the last heartbeat tick (when, result, duration) and the
last reaper pass (when, how long, what it decided, counted by action).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return runStatus(cmd.Context(), env, out) },
	}
	addOutputFlags(c, &out, "wide: as the default, which shows every field")
	return c
}

func newHealthCmd(env *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "health",
		Short: "Exit 0 when the agent answers and its store is reachable (container health checks)",
		Long: `Exit 0 and print "ok" when the agent answers on its socket, its store
answers a read, its heartbeat loop is ticking and it is not shutting down.
Otherwise exit 1 with a one-line reason on stderr. Docker's HEALTHCHECK and
Kubernetes probes run it; it gives up after 5s.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return runHealth(cmd.Context(), env) },
	}
}

func newEventsCmd(env *cli) *cobra.Command {
	var o eventsOpts
	c := &cobra.Command{
		Use:   "events [--follow] [--card ID] [--type T]... [--since D|TIME] [-o json|yaml|wide]",
		Short: "Print the audit event log",
		Long: `Print the audit event log, oldest first, after --after.

--card, --type (repeatable: any of them) and --since (a duration back from
now, as 90s or 2h, or an RFC 3339 time) keep only the matching events. The
agent's log API has no such filter: events applies them itself, on the log
it reads and on the --follow stream. A labels event names the labels added
(+L) and removed (-L), then the card's labels after it.

-o json (or --json) prints one JSON event per line; -o yaml one YAML
document per event, each after "---".

With --follow, keep printing events as the agent logs them until SIGINT or
SIGTERM (exit 0). When the agent goes away (a restart, an upgrade), say so
on stderr, reconnect with backoff and resume after the last event printed:
no event is printed twice or skipped. An answer that refuses the request
itself ends the command (exit 1).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return runEvents(cmd.Context(), env, o) },
	}
	c.Flags().BoolVarP(&o.follow, "follow", "f", false, "keep printing new events")
	addOutputFlags(c, &o.out, "wide: as the default, one line per event")
	c.Flags().Int64Var(&o.after, "after", 0, "start after this sequence number")
	c.Flags().StringVar(&o.card, "card", "", "only this card's events")
	c.Flags().StringArrayVar(&o.types, "type", nil, "only events of this type (repeatable: any of them)")
	c.Flags().StringVar(&o.since, "since", "", "only events at or after this time: a duration back from now (90s, 2h) or an RFC 3339 time")
	return c
}

func newReaperCmd(env *cli) *cobra.Command {
	c := &cobra.Command{
		Use:   "reaper",
		Short: "Drive the watchdog",
		Args:  subcommandArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return withCode(exitUsage, cmd.Help()) },
	}
	var o reaperOpts
	p := &cobra.Command{
		Use:   "pass [--dry-run]",
		Short: "Run one reaper pass now and print what it did (or would do)",
		Args:  exactArgs(0),
		RunE:  func(cmd *cobra.Command, _ []string) error { return runReaperPass(cmd.Context(), env, o) },
	}
	p.Flags().BoolVar(&o.dryRun, "dry-run", false, "decide but write nothing")
	p.Flags().BoolVar(&o.json, "json", false, "print JSON")
	c.AddCommand(p)
	return c
}

// pluginCmdName is the hidden subcommand the agent re-executes its own
// binary with to serve the built-in stores as a go-plugin plugin.
const pluginCmdName = "store-plugin"

// newSupervisorCmd is the hidden subcommand `claim` re-executes its own
// binary with: the supervisor of CMD's process tree. Its arguments are
// package supervise's, passed through unparsed.
func newSupervisorCmd() *cobra.Command {
	return &cobra.Command{
		Use:                supervisorCmdName,
		Short:              "Supervise a claim's command (started by `leasekeeper claim`)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			if code := supervise.Serve(args); code != 0 {
				return withCode(code, errors.New("claim supervisor: bad invocation"))
			}
			return nil
		},
	}
}

func newPluginCmd(env *cli) *cobra.Command {
	return &cobra.Command{
		Use:    pluginCmdName,
		Short:  "Serve a built-in store as a plugin (started by the agent)",
		Hidden: true,
		Args:   exactArgs(0),
		RunE:   func(cmd *cobra.Command, _ []string) error { return runStorePlugin(cmd.Context(), env) },
	}
}
