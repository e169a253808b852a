package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

type cardCreateOpts struct {
	id, title, state string
	dependsOn        []string
	labels           []string
	json             bool
	// retry is the card's own retry policy (DESIGN.md#retries); zero
	// fields are the board's.
	retry board.RetryPolicy
}

type cardListOpts struct {
	state   string
	labels  []string
	claimed bool
	limit   int
	out     outputOpts
}

type cardShowOpts struct {
	id  string
	out outputOpts
}

type cardLabelOpts struct {
	id          string
	add, remove []string
	set         []string
	setGiven    bool
	json        bool
}

// client returns a client for the agent named by --socket, else
// LEASEKEEPER_SOCKET, else the default path.
func (env *cli) client() *client.Client { return &client.Client{Socket: env.socket} }

// agentError makes a failure to reach the agent say what to check: a
// socket this user may not connect to is not an agent that is down.
func (env *cli) agentError(c *client.Client, err error) error {
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
		return socketDenied(c.SocketPath(), err)
	}
	var op *net.OpError
	if errors.As(err, &op) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("cannot reach the agent at %s (is `leasekeeper agent` running? set --socket or LEASEKEEPER_SOCKET): %w", c.SocketPath(), err)
	}
	if errors.Is(err, board.ErrEventsPruned) {
		// DESIGN.md#retention: never a silent gap.
		return fmt.Errorf("the events after this position were deleted by retention (prune), so reading on would skip them: run the command again without a position (it reads what the log keeps), and see docs/OPERATIONS.md#retention: %w", err)
	}
	return err
}

// socketAccessDoc is where the operator's guide says who may connect to
// the socket and how to grant it.
const socketAccessDoc = "docs/OPERATIONS.md#security-model"

// socketDenied says why the kernel refused this process the agent's
// socket: the socket's mode (0660) lets in its owner and its group only,
// or a directory on its path may not be searched.
func socketDenied(path string, err error) error {
	var st syscall.Stat_t
	if serr := syscall.Stat(path, &st); serr != nil {
		return fmt.Errorf("permission denied reaching the agent's socket %s: this user (uid %d) may not search a directory on its path (%v); see %s: %w",
			path, os.Getuid(), serr, socketAccessDoc, err)
	}
	group := fmt.Sprintf("gid %d", st.Gid)
	name := strconv.FormatUint(uint64(st.Gid), 10)
	if g, gerr := user.LookupGroupId(name); gerr == nil {
		name = g.Name
		group = fmt.Sprintf("%s (gid %d)", g.Name, st.Gid)
	}
	return fmt.Errorf("permission denied on the agent's socket %s (owner uid %d, group %s, mode %04o): this user (uid %d) is neither its owner nor in its group; "+
		"add the user to that group (usermod -aG %s USER, then log in again) or run as the agent's user; see %s: %w",
		path, st.Uid, group, st.Mode&0o7777, os.Getuid(), name, socketAccessDoc, err)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runCardCreate(ctx context.Context, env *cli, o cardCreateOpts) error {
	if err := o.retry.Validate(); err != nil {
		return usageError("%v", err)
	}
	nc := board.CreateCardParams{
		ID: o.id, Title: o.title, State: o.state, Labels: o.labels, DependsOn: o.dependsOn, Actor: "cli",
	}
	if !o.retry.IsZero() {
		nc.Retry = &o.retry
	}
	c := env.client()
	card, err := c.CreateCard(ctx, nc)
	if err != nil {
		return env.agentError(c, err)
	}
	if o.json {
		return printJSON(env.stdout, card)
	}
	fmt.Fprintf(env.stdout, "created %s in %s\n", card.ID, card.State)
	return nil
}

func runCardList(ctx context.Context, env *cli, o cardListOpts) error {
	format, err := o.out.resolve()
	if err != nil {
		return err
	}
	if o.limit < 0 {
		return usageError("--limit %d: want 0 (no limit) or more", o.limit)
	}
	// The labels as the store keeps them (trimmed, empty ones dropped).
	if o.labels, err = board.NormalizeLabels(o.labels); err != nil {
		return usageError("--label: %v", err)
	}
	cards, err := listCards(ctx, env, o)
	if err != nil {
		return err
	}
	if cards == nil {
		cards = []board.Card{}
	}
	if done, err := printOutput(env.stdout, format, cards); done {
		return err
	}
	var t table
	if format == outputWide {
		t.row("ID", "STATE", "CLAIM", "EPOCH", "LEASE-UNTIL", "LABELS", "DEPS", "LAST-RUN", "UPDATED", "TITLE")
	} else {
		t.row("ID", "STATE", "CLAIM", "EPOCH", "LABELS", "DEPS", "TITLE")
	}
	for _, cd := range cards {
		claim, epoch := orDash(cd.Claim), strconv.FormatInt(cd.ClaimEpoch, 10)
		labels, deps := orDash(strings.Join(cd.Labels, ",")), orDash(strings.Join(cd.DependsOn, ","))
		if format == outputWide {
			t.row(cd.ID, cd.State, claim, epoch, tableTime(cd.ClaimLeaseUntil), labels, deps,
				orDash(cd.LastRunID), tableTime(cd.UpdatedAt), cd.Title)
		} else {
			t.row(cd.ID, cd.State, claim, epoch, labels, deps, truncateCells(cd.Title, titleWidth))
		}
	}
	return t.write(env.stdout)
}

// tableTime is a time in a table cell: UTC to the second, "-" when unset.
func tableTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// listCards reads the cards `card ls` shows. The agent filters by state,
// claimed and limit (GET /v1/cards); it has no label filter, so --label
// is applied here, on every card the agent returns for the other
// filters, and --limit then counts the cards that carry the labels.
func listCards(ctx context.Context, env *cli, o cardListOpts) ([]board.Card, error) {
	c := env.client()
	f := board.ListCardsParams{State: o.state, ClaimedOnly: o.claimed, Limit: o.limit}
	if len(o.labels) > 0 {
		f.Limit = 0
	}
	cards, err := c.ListCards(ctx, f)
	if err != nil {
		return nil, env.agentError(c, err)
	}
	if len(o.labels) == 0 {
		return cards, nil
	}
	var out []board.Card
	for _, cd := range cards {
		if !hasAllLabels(cd.Labels, o.labels) {
			continue
		}
		out = append(out, cd)
		if o.limit > 0 && len(out) == o.limit {
			break
		}
	}
	return out, nil
}

// hasAllLabels says whether a card carrying have carries every label in
// want (normalized as the store keeps labels; compared case-sensitively).
func hasAllLabels(have, want []string) bool {
	for _, l := range want {
		if !slices.Contains(have, l) {
			return false
		}
	}
	return true
}

func runCardShow(ctx context.Context, env *cli, o cardShowOpts) error {
	format, err := o.out.resolve()
	if err != nil {
		return err
	}
	c := env.client()
	cd, err := c.GetCard(ctx, o.id)
	if err != nil {
		return env.agentError(c, err)
	}
	if done, err := printOutput(env.stdout, format, cd); done {
		return err
	}
	// The card's attempts are shown against its effective policy, which
	// takes the board's for what the card does not set.
	var policy *board.RetryPolicy
	if b, err := c.Board(ctx); err == nil {
		p := b.RetryFor(cd)
		policy = &p
	}
	printCard(env.stdout, cd, policy) // wide: the same; it shows every field
	return nil
}

func printCard(w io.Writer, cd board.Card, policy *board.RetryPolicy) {
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
		return t.Format(time.RFC3339Nano)
	}
	row("id", cd.ID)
	row("title", cd.Title)
	row("state", cd.State)
	row("state_reason", string(cd.StateReason))
	row("labels", strings.Join(cd.Labels, ", "))
	row("depends_on", strings.Join(cd.DependsOn, ", "))
	row("last_run_id", cd.LastRunID)
	row("runs", strings.Join(cd.Runs, ", "))
	if cd.AwaitingInput {
		row("awaiting_input", "true")
	}
	if g := cd.GaveUp; g != nil {
		row("gave_up", fmt.Sprintf("%s (run %s, state %s, at %s)", g.Reason, g.RunID, g.State, ts(g.At)))
	}
	// DESIGN.md#retries: the attempts against the card's effective policy.
	if policy != nil {
		own := "the board's"
		if cd.Retry != nil {
			own = "its own over the board's"
		}
		row("attempts", fmt.Sprintf("%d of %d (retry policy: %s, %s)", cd.Attempts, policy.MaxAttempts, own, policy))
	} else {
		row("attempts", strconv.Itoa(cd.Attempts))
	}
	row("retry_at", ts(cd.RetryAt))
	row("claim", cd.Claim)
	fmt.Fprintf(tw, "claim_epoch:\t%d\n", cd.ClaimEpoch)
	row("claimed_at", ts(cd.ClaimedAt))
	row("claim_lease_until", ts(cd.ClaimLeaseUntil))
	row("created_at", ts(cd.CreatedAt))
	row("updated_at", ts(cd.UpdatedAt))
	_ = tw.Flush()
}

func runCardMove(ctx context.Context, env *cli, id, state string) error {
	c := env.client()
	cd, err := c.MoveCard(ctx, id, state)
	if errors.Is(err, board.ErrTerminalStateExit) {
		from := "a terminal state"
		if cur, gerr := c.GetCard(ctx, id); gerr == nil {
			from = fmt.Sprintf("terminal state %q", cur.State)
		}
		fmt.Fprintf(env.stderr, "refused: card %s is in %s, and terminal states are sinks: no ordinary move leaves them.\n", id, from)
		fmt.Fprintf(env.stderr, "To bring it back, reopen it:  leasekeeper card reopen %s %s\n", id, state)
		return err
	}
	if err != nil {
		return env.agentError(c, err)
	}
	fmt.Fprintf(env.stdout, "moved %s to %s\n", cd.ID, cd.State)
	return nil
}

func runCardReopen(ctx context.Context, env *cli, id, state string) error {
	c := env.client()
	cd, err := c.ReopenCard(ctx, id, state)
	if err != nil {
		return env.agentError(c, err)
	}
	fmt.Fprintf(env.stdout, "reopened %s into %s\n", cd.ID, cd.State)
	return nil
}

func runCardLabel(ctx context.Context, env *cli, o cardLabelOpts) error {
	if o.setGiven && (len(o.add) > 0 || len(o.remove) > 0) {
		return usageError("--set replaces every label: it cannot be combined with --add or --remove")
	}
	if !o.setGiven && len(o.add) == 0 && len(o.remove) == 0 {
		return usageError("nothing to do: give --add, --remove or --set")
	}
	c := env.client()
	var cd board.Card
	var err error
	if o.setGiven {
		cd, err = c.SetLabels(ctx, o.id, o.set)
	} else {
		cd, err = c.AdjustLabels(ctx, o.id, o.add, o.remove)
	}
	if err != nil {
		return env.agentError(c, err)
	}
	if o.json {
		return printJSON(env.stdout, cd)
	}
	fmt.Fprintf(env.stdout, "%s labels: %s\n", cd.ID, strings.Join(cd.Labels, ","))
	return nil
}

func runCardRelease(ctx context.Context, env *cli, id string) error {
	c := env.client()
	res, err := c.ForceRelease(ctx, id)
	if err != nil {
		return env.agentError(c, err)
	}
	if res.Holder == "" {
		fmt.Fprintf(env.stdout, "%s was not claimed: nothing to release\n", res.Card)
		return nil
	}
	fmt.Fprintf(env.stdout, "released %s from %s (epoch %d); its holder is told and its later writes are refused\n",
		res.Card, res.Holder, res.Epoch)
	return nil
}
