package boardadmin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/leasekeeper/leasekeeper/board"
)

// oneLabel validates an operator-given label: it must already be in the
// normal form the store keeps (trimmed, printable, bounded).
func oneLabel(what, l string) error {
	n, err := board.NormalizeLabels([]string{l})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if len(n) != 1 || n[0] != l {
		return board.Invalid("%s %q is empty or has surrounding whitespace", what, l)
	}
	return nil
}

// replaceLabels returns labels with every label in from replaced by to at
// the position of the first one found, keeping the order of the rest and
// never listing a label twice. An empty to deletes.
func replaceLabels(labels, from []string, to string) []string {
	out := make([]string, 0, len(labels))
	for _, l := range labels {
		if slices.Contains(from, l) {
			l = to
		}
		if l == "" || slices.Contains(out, l) {
			continue
		}
		out = append(out, l)
	}
	return out
}

// RenameLabel renames label old to new on every card. A card that already
// carries new keeps it once.
func (a *Admin) RenameLabel(ctx context.Context, old, new string) (board.SweepReport, error) {
	op := fmt.Sprintf("label rename %q → %q", old, new)
	if err := errors.Join(oneLabel("label", old), oneLabel("new label", new)); err != nil {
		return newReport(op), fmt.Errorf("%s: %w", op, err)
	}
	if old == new {
		return newReport(op), board.Invalid("%s: the names are the same", op)
	}
	return a.walkLabels(ctx, op, board.ReasonFieldRename, func(l []string) []string { return replaceLabels(l, []string{old}, new) })
}

// MergeLabels replaces every label of from by into on every card (into may
// be one of them).
func (a *Admin) MergeLabels(ctx context.Context, from []string, into string) (board.SweepReport, error) {
	op := fmt.Sprintf("label merge %q into %q", from, into)
	errs := []error{oneLabel("target label", into)}
	if len(from) == 0 {
		errs = append(errs, board.Invalid("no labels to merge"))
	}
	for _, l := range from {
		errs = append(errs, oneLabel("label", l))
	}
	if err := errors.Join(errs...); err != nil {
		return newReport(op), fmt.Errorf("%s: %w", op, err)
	}
	return a.walkLabels(ctx, op, board.ReasonFieldRename, func(l []string) []string { return replaceLabels(l, from, into) })
}

// DeleteLabel removes label l from every card.
func (a *Admin) DeleteLabel(ctx context.Context, l string) (board.SweepReport, error) {
	op := fmt.Sprintf("label delete %q", l)
	if err := oneLabel("label", l); err != nil {
		return newReport(op), fmt.Errorf("%s: %w", op, err)
	}
	return a.walkLabels(ctx, op, board.ReasonFieldDelete, func(ls []string) []string { return replaceLabels(ls, []string{l}, "") })
}

// walkLabels applies transform to the labels of every card of a snapshot,
// each write a compare-and-set on the labels the transform was given
// (DESIGN.md#label-sweeps: the snapshot ages for the whole walk; writing it back
// blindly is the lost update that resurrected consumed one-shot labels).
func (a *Admin) walkLabels(ctx context.Context, op string, reason board.Reason, transform func([]string) []string) (board.SweepReport, error) {
	rep := newReport(op)
	cards, err := a.cfg.Store.ListCards(ctx, board.ListCardsParams{})
	if err != nil {
		return rep, fmt.Errorf("%s: list cards: %w", op, err)
	}
	rep.Cards, rep.DryRun = len(cards), a.cfg.DryRun
	for i, c := range cards {
		var o outcome
		if a.cfg.DryRun {
			o = previewLabels(c, transform)
		} else if o, err = a.labelCard(ctx, c, reason, transform); err != nil {
			return rep, progress(op, c.ID, i, len(cards), err)
		}
		record(&rep, c.ID, o)
		a.progressed(i+1, len(cards))
	}
	return rep, nil
}

// previewLabels is a dry run's outcome for one card: whether the
// transform changes the labels the snapshot read.
func previewLabels(c board.Card, transform func([]string) []string) outcome {
	if slices.Equal(transform(slices.Clone(c.Labels)), c.Labels) {
		return outUnchanged
	}
	return outChanged
}

func (a *Admin) labelCard(ctx context.Context, cur board.Card, reason board.Reason, transform func([]string) []string) (outcome, error) {
	for attempt := 1; attempt <= a.cfg.Attempts; attempt++ {
		next := transform(slices.Clone(cur.Labels))
		if slices.Equal(next, cur.Labels) {
			// Nothing (left) to do: the card never carried the label, or a
			// concurrent writer already took it away.
			return outUnchanged, nil
		}
		var got board.Card
		var changed bool
		err := a.write(ctx, cur.ID, attempt, func(ctx context.Context) error {
			set, err := a.cfg.Store.SetLabelsFrom(ctx, board.SetLabelsFromParams{
				Card: cur.ID, Expect: cur.Labels, Labels: next, Reason: reason, Actor: a.cfg.Actor,
			})
			got, changed = set.Card, set.Changed
			return err
		})
		switch {
		case errors.Is(err, board.ErrNotFound):
			return outGone, nil
		case err != nil:
			return 0, err
		case changed:
			return outChanged, nil
		}
		// A miss: another writer changed the labels since they were read.
		// Transform what is there now, never what the snapshot said.
		cur = got
	}
	return outContended, nil
}
