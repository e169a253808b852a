package board

import (
	"context"
	"fmt"
	"slices"
)

// The board-administration verbs (DESIGN.md#label-sweeps). The board
// definition lives in the store, so every agent sharing one store sees the
// same states; the sweeps that rename or delete a state or a label walk a
// snapshot of the cards ABOVE the store and write each card with a
// compare-and-set on what they read (package boardadmin). The verbs here
// are the store's half of that: read and compare-and-set the definition,
// and compare-and-set a card's labels.

// SetLabelsFromParams is a compare-and-set of a card's whole label list: it writes
// Labels only while the stored list is still exactly Expect (same labels,
// same order). Reason is the provenance stamped on the labels event; the
// admin sweeps pass ReasonFieldRename or ReasonFieldDelete, which fire no
// effect (no one-shot is armed or consumed by a sweep).
type SetLabelsFromParams struct {
	Card   string   `json:"card"`
	Expect []string `json:"expect"`
	Labels []string `json:"labels"`
	Reason Reason   `json:"reason,omitempty"`
	Actor  string   `json:"actor,omitempty"`
}

// SetLabelsFromResult is the card as SetLabelsFrom left it, and whether
// the write happened (false: the labels were no longer Expect).
type SetLabelsFromResult struct {
	Card    Card `json:"card"`
	Changed bool `json:"changed"`
}

// SetBoardParams replaces the stored board definition Expect with Next
// (SetBoard, a compare-and-set).
type SetBoardParams struct {
	Expect Board `json:"expect"`
	Next   Board `json:"next"`
}

// SetBoardResult is the stored definition after SetBoard, and whether the
// write happened (false: the stored one was no longer Expect).
type SetBoardResult struct {
	Board   Board `json:"board"`
	Changed bool  `json:"changed"`
}

// BoardReader is the read of the board definition, which lives in the
// store (DESIGN.md#board-in-store). CardReader and BoardAdmin both carry it.
type BoardReader interface {
	// LoadBoard reads the stored board definition, as of the read: another
	// writer of a shared store may change it at any time
	// (DESIGN.md#board-in-store).
	//storegen:read
	LoadBoard(ctx context.Context) (Board, error)
}

// BoardAdmin is the part of the Store contract that administers the board
// (DESIGN.md#label-sweeps).
type BoardAdmin interface {
	BoardReader

	// SetBoard replaces the stored definition with next while it is still
	// exactly expect (a compare-and-set). On a miss nothing is written and
	// it returns the stored board with changed=false. next must validate.
	// It touches no card: moving cards is the sweeps' job.
	SetBoard(ctx context.Context, p SetBoardParams) (SetBoardResult, error)
	// SetLabelsFrom writes l.Labels while the card's labels are still
	// exactly l.Expect. A miss writes nothing and returns the card as it
	// is now with changed=false, so the caller can re-transform what it
	// sees; an unknown card is ErrNotFound. Equal lists write nothing.
	SetLabelsFrom(ctx context.Context, p SetLabelsFromParams) (SetLabelsFromResult, error)
}

// Retiring reports whether the state is being retired into another one by
// a state sweep (see State.RetiringInto).
func (s State) Retiring() bool { return s.RetiringInto != "" }

// RequireTarget returns the named state when a card may be moved into (or
// created in) it: the state exists and is not being retired.
func (b Board) RequireTarget(name string) (State, error) {
	s, err := b.Require(name)
	if err != nil {
		return State{}, err
	}
	if s.Retiring() {
		return State{}, Invalid("state %q is being retired into %q; use %q", name, s.RetiringInto, s.RetiringInto)
	}
	return s, nil
}

// Equal reports whether two boards have the same states, flags and order.
func (b Board) Equal(o Board) bool { return slices.Equal(b.States, o.States) && b.Retry == o.Retry }

// Clone returns a copy that shares no memory with b.
func (b Board) Clone() Board { return Board{States: slices.Clone(b.States), Retry: b.Retry} }

// Diff names, in plain words, how other differs from b: states only one
// of them has, flags that differ, and a different order. An empty result
// means the boards are equal. The agent logs it at start when its
// configuration disagrees with the board stored in a shared store.
func (b Board) Diff(other Board) []string { return b.DiffNamed(other, "first", "second") }

// DiffNamed is Diff with the two boards named in its sentences, e.g.
// "configured" and "stored".
func (b Board) DiffNamed(other Board, name, otherName string) []string {
	var out []string
	for _, s := range b.States {
		o, ok := other.State(s.Name)
		if !ok {
			out = append(out, fmt.Sprintf("state %q is only in the %s board", s.Name, name))
			continue
		}
		if s != o {
			out = append(out, fmt.Sprintf("state %q is %s in the %s board, %s in the %s board", s.Name, flagsOf(s), name, flagsOf(o), otherName))
		}
	}
	for _, o := range other.States {
		if !b.Has(o.Name) {
			out = append(out, fmt.Sprintf("state %q is only in the %s board", o.Name, otherName))
		}
	}
	if b.Retry != other.Retry {
		out = append(out, fmt.Sprintf("the retry policy is %s in the %s board, %s in the %s board", b.RetryFor(Card{}), name, other.RetryFor(Card{}), otherName))
	}
	if len(out) == 0 && !slices.Equal(b.States, other.States) {
		out = append(out, fmt.Sprintf("same states in another order: %s in the %s board, %s in the %s board", names(b), name, names(other), otherName))
	}
	return out
}

func names(b Board) []string {
	out := make([]string, len(b.States))
	for i, s := range b.States {
		out[i] = s.Name
	}
	return out
}

func flagsOf(s State) string {
	var f []string
	for _, x := range []struct {
		on   bool
		name string
	}{{s.Pool, "pool"}, {s.Launch, "launch"}, {s.Running, "running"}, {s.Terminal, "terminal"}, {s.Completion, "completion"}} {
		if x.on {
			f = append(f, x.name)
		}
	}
	if s.Retiring() {
		f = append(f, "retiring into "+s.RetiringInto)
	}
	if len(f) == 0 {
		return "[no flags]"
	}
	return fmt.Sprint(f)
}

// SweepReport is what one board-administration operation did: the cards
// it looked at and, for each, whether it changed it, found nothing to do,
// found it gone, or gave up on it because other writers kept changing it.
type SweepReport struct {
	// Op names the operation, e.g. `label rename "a" → "b"`.
	Op string `json:"op"`
	// Cards is the size of the snapshot the walk started from.
	Cards int `json:"cards"`
	// Changed lists the cards the operation wrote, in walk order.
	Changed []string `json:"changed"`
	// Unchanged counts the cards that needed no write (the label was not
	// there, or another writer had already moved the card on).
	Unchanged int `json:"unchanged"`
	// Gone lists cards that disappeared during the walk (benign).
	Gone []string `json:"gone,omitempty"`
	// Contended lists cards still contended after every attempt: the walk
	// went on without them. Re-running the operation picks them up.
	Contended []string `json:"contended,omitempty"`
	// Board is the board definition after a state operation.
	Board *Board `json:"board,omitempty"`
	// Notes says what the operator should know (a state left retiring,
	// a well-known state name whose behaviour the change gives up).
	Notes []string `json:"notes,omitempty"`
	// DryRun: the operation only decided and wrote nothing. Changed lists
	// the cards it would write and Board the definition it would leave.
	DryRun bool `json:"dry_run,omitempty"`
}
