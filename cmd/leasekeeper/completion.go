package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

// completionShells are the shells `leasekeeper completion` writes scripts
// for. Cobra generates them from the command tree, so they never fall out of
// step with the commands and flags; the scripts ask the binary itself (the
// hidden __complete command cobra adds) for the candidates.
var completionShells = []string{"bash", "zsh", "fish"}

func newCompletionCmd(env *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print a shell completion script",
		Long: `Print a completion script for bash, zsh or fish on stdout.

  bash  (needs the bash-completion package)
        leasekeeper completion bash > /etc/bash_completion.d/leasekeeper
        or, for one user:
        leasekeeper completion bash > ~/.local/share/bash-completion/completions/leasekeeper
  zsh   leasekeeper completion zsh > "${fpath[1]}/_leasekeeper"
        (compinit must be enabled: autoload -U compinit; compinit)
  fish  leasekeeper completion fish > ~/.config/fish/completions/leasekeeper.fish

Start a new shell afterwards. Card ids and state names complete from the
running agent (over --socket or LEASEKEEPER_SOCKET, as every command);
when it does not answer within a second there are no suggestions.`,
		ValidArgs: completionShells,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError("want one shell (bash, zsh or fish), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(env.stdout, true)
			case "zsh":
				return root.GenZshCompletion(env.stdout)
			case "fish":
				return root.GenFishCompletion(env.stdout, true)
			}
			return usageError("unknown shell %q: want bash, zsh or fish", args[0])
		},
	}
}

// completionTimeout bounds the agent read behind one completion: the shell
// waits for it on every TAB, and an agent that is slow or away must cost
// the user no more than a pause.
const completionTimeout = time.Second

// Which cards a card-id argument offers.
type cardPick int

const (
	anyCard       cardPick = iota
	claimedCard            // card release: only a held card can be released
	claimableCard          // claim: a free card outside a sink and waiting_deps
	waitableCard           // claim --wait: any card outside a sink (held or waiting_deps: waited for)
)

// Which states a state argument or flag offers.
type statePick int

const (
	anyState     statePick = iota
	workingState           // card reopen: only into a non-terminal state
)

// completeFn is a cobra completion function.
type completeFn = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective)

// addAgentCompletions makes the arguments and flags that name a card or a
// state complete from what the agent serves: card ids (with their state
// and title as the description) and the board's state names. Every
// candidate is read over the socket the command would use (--socket,
// LEASEKEEPER_SOCKET, the default); when the agent cannot be reached in
// completionTimeout the shell gets no candidates and no message.
func addAgentCompletions(env *cli, root *cobra.Command) {
	cards := func(p cardPick) completeFn {
		return func(_ *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return env.cardCandidates(p, prefix), cobra.ShellCompDirectiveNoFileComp
		}
	}
	states := func(p statePick) completeFn {
		return func(_ *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return env.stateCandidates(p, prefix), cobra.ShellCompDirectiveNoFileComp
		}
	}
	// positional: one function per argument position; a position past the
	// list offers nothing (and no file names).
	positional := func(fns ...completeFn) completeFn {
		return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) >= len(fns) || fns[len(args)] == nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return fns[len(args)](cmd, args, prefix)
		}
	}
	args := map[string]completeFn{
		"card create":        positional(), // a new id
		"card show":          positional(cards(anyCard)),
		"card label":         positional(cards(anyCard)),
		"card move":          positional(cards(anyCard), states(anyState)),
		"card reopen":        positional(cards(anyCard), states(workingState)),
		"card release":       positional(cards(claimedCard)),
		"run show":           positional(env.runCandidates),
		"card wait":          positional(cards(anyCard)),
		"card delete":        positional(cards(anyCard)),
		"prune":              positional(),
		"board state rename": positional(states(anyState)),
		"board state delete": positional(states(anyState)),
		"claim":              claimArgs(env, cards(claimableCard), cards(waitableCard)),
	}
	flags := map[string]map[string]completeFn{
		"card create":        {"state": states(anyState)},
		"card ls":            {"state": states(anyState)},
		"card wait":          {"for": states(anyState)},
		"events":             {"card": cards(anyCard), "type": eventTypeCandidates},
		"run ls":             {"card": cards(anyCard), "status": runStatusCandidates},
		"board state delete": {"into": states(anyState)},
	}
	for path, fn := range args {
		mustFind(root, path).ValidArgsFunction = fn
	}
	for path, byFlag := range flags {
		cmd := mustFind(root, path)
		for flag, fn := range byFlag {
			if err := cmd.RegisterFlagCompletionFunc(flag, fn); err != nil {
				panic(fmt.Sprintf("completion for %s --%s: %v", path, flag, err))
			}
		}
	}
}

// eventTypeCandidates completes `events --type`: the event types, which
// need no agent.
func eventTypeCandidates(_ *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var out []cobra.Completion
	for _, t := range eventTypes {
		if strings.HasPrefix(string(t), prefix) {
			out = append(out, string(t))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// runStatusCandidates completes `run ls --status`: the run statuses,
// which need no agent.
func runStatusCandidates(_ *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var out []cobra.Completion
	for _, s := range runStatuses {
		if strings.HasPrefix(string(s), prefix) {
			out = append(out, string(s))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// runCandidates completes `run show`: the ids of the agent's runs that
// start with prefix, newest first, each described by its card and status;
// nothing when the agent does not answer in completionTimeout.
func (env *cli) runCandidates(_ *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	runs, err := env.client().ListRuns(ctx, client.RunFilter{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, r := range runs {
		if strings.HasPrefix(r.ID, prefix) {
			out = append(out, cobra.CompletionWithDesc(r.ID, r.Card+" "+string(r.Status)))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// claimArgs completes `claim`: a card id before --, unless --next is
// given (with --wait, a held card or one waiting on its blockers too: it is
// waited for); after -- the shell's own completion of the command and its
// arguments.
//
// Whether -- came before the word being completed is read from the command
// line itself: cobra's __complete parses the flags twice, once with a --
// of its own appended, so ArgsLenAtDash does not tell.
func claimArgs(env *cli, cards, waitable completeFn) completeFn {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if n := len(env.args); n > 0 && slices.Contains(env.args[:n-1], "--") {
			return nil, cobra.ShellCompDirectiveDefault
		}
		if next, _ := cmd.Flags().GetBool("next"); next || len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		if f := cmd.Flags().Lookup("wait"); f != nil && f.Changed {
			return waitable(cmd, args, prefix)
		}
		return cards(cmd, args, prefix)
	}
}

// mustFind is the command at path (space separated, under root). The
// tables above name commands by path, so a renamed command fails every
// test that builds the command tree.
func mustFind(root *cobra.Command, path string) *cobra.Command {
	cmd := root
	for _, name := range strings.Fields(path) {
		var next *cobra.Command
		for _, sub := range cmd.Commands() {
			if sub.Name() == name {
				next = sub
			}
		}
		if next == nil {
			panic("completion: no command " + strconv.Quote(path))
		}
		cmd = next
	}
	return cmd
}

// cardCandidates are the ids of the agent's cards that start with prefix,
// each described by its state and title; nil when the agent does not
// answer. For claim they are the cards a claim by id would take: free, and
// neither in a terminal state (a sink: exit 123) nor waiting on their
// blockers in waiting_deps (exit 121), by the agent's board.
func (env *cli) cardCandidates(p cardPick, prefix string) []cobra.Completion {
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	c := env.client()
	cards, err := c.ListCards(ctx, board.ListCardsParams{ClaimedOnly: p == claimedCard})
	if err != nil {
		return nil
	}
	var b board.Board
	if p == claimableCard || p == waitableCard {
		if b, err = c.Board(ctx); err != nil {
			return nil
		}
	}
	claimable := func(c board.Card) bool {
		return !c.Claimed() && !b.IsTerminal(c.State) && c.State != board.StateWaitingDeps
	}
	var out []cobra.Completion
	for _, c := range cards {
		if !strings.HasPrefix(c.ID, prefix) || (p == claimableCard && !claimable(c)) || (p == waitableCard && b.IsTerminal(c.State)) {
			continue
		}
		desc := c.State
		if c.Title != "" {
			desc += ": " + c.Title // the store refuses control characters in a title
		}
		out = append(out, cobra.CompletionWithDesc(c.ID, desc))
	}
	return out
}

// stateCandidates are the names of the agent's board states that start
// with prefix, in board order; nil when the agent does not answer. A
// retiring state (a sweep is renaming or deleting it) is left out: no card
// may enter it.
func (env *cli) stateCandidates(p statePick, prefix string) []cobra.Completion {
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	b, err := env.client().Board(ctx)
	if err != nil {
		return nil
	}
	var out []cobra.Completion
	for _, s := range b.States {
		if !strings.HasPrefix(s.Name, prefix) || s.RetiringInto != "" || (p == workingState && s.Terminal) {
			continue
		}
		out = append(out, s.Name)
	}
	return out
}
