package boardadmin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/leasekeeper/leasekeeper/board"
)

// wellKnown names states whose NAME carries behaviour (board.StateFailed
// is where the watchdog files a failed run, board.StateWaitingDeps is where
// a card with open blockers waits, ...). Renaming or deleting one is
// allowed, but the report says what stops working.
var wellKnown = map[string]string{
	board.StateWaitingDeps: "cards created with open blockers will no longer wait, nothing will be promoted, and a claim by id will no longer refuse a card whose blockers are open",
	board.StateFailed:      "the watchdog files failed runs to the state named failed and refuses to run without it",
	board.StateBlocked:     "the watchdog's run ceiling files to the state named blocked",
}

// RenameState renames state old to new: new takes old's place and flags,
// and every card in old moves to new with reason state_rename. A rename
// interrupted part way (old still retiring into new) is resumed by running
// it again.
func (a *Admin) RenameState(ctx context.Context, old, new string) (board.SweepReport, error) {
	op := fmt.Sprintf("state rename %q → %q", old, new)
	if err := errors.Join(board.ValidateName("state", old), board.ValidateName("new state", new)); err != nil {
		return newReport(op), fmt.Errorf("%s: %w", op, err)
	}
	if old == new {
		return newReport(op), board.Invalid("%s: the names are the same", op)
	}
	// The board while the cards move: new inserted right after old with
	// old's flags, and old retiring into new, so new holds old's roles and
	// no card can enter old any more.
	retire := func(b board.Board) (board.Board, error) {
		st, ok := b.State(old)
		if !ok {
			return b, board.Invalid("no state %q on the board", old)
		}
		if st.Retiring() {
			if st.RetiringInto == new {
				return b, nil // resuming an interrupted rename
			}
			return b, board.Invalid("state %q is already being retired into %q; finish that first", old, st.RetiringInto)
		}
		if b.Has(new) {
			return b, board.Invalid("state %q already exists; to move %q's cards into it use state delete %s --into %s", new, old, old, new)
		}
		i := slices.IndexFunc(b.States, func(s board.State) bool { return s.Name == old })
		successor := st
		successor.Name = new
		b.States[i].RetiringInto = new
		b.States = slices.Insert(b.States, i+1, successor)
		return b, nil
	}
	return a.sweepState(ctx, op, old, new, board.ReasonStateRename, retire)
}

// DeleteState deletes state s, moving its cards into into with reason
// state_delete. Moving cards out of a terminal state into a working one is
// a bulk reopen: it is refused, changing nothing, while any of those cards
// has a dependent outside waiting_deps (DESIGN.md#reopen).
func (a *Admin) DeleteState(ctx context.Context, s, into string) (board.SweepReport, error) {
	op := fmt.Sprintf("state delete %q into %q", s, into)
	if err := errors.Join(board.ValidateName("state", s), board.ValidateName("target state", into)); err != nil {
		return newReport(op), fmt.Errorf("%s: %w", op, err)
	}
	if s == into {
		return newReport(op), board.Invalid("%s: a state cannot be deleted into itself", op)
	}
	retire := func(b board.Board) (board.Board, error) {
		st, ok := b.State(s)
		if !ok {
			return b, board.Invalid("no state %q on the board", s)
		}
		target, err := b.RequireTarget(into)
		if err != nil {
			return b, err
		}
		if st.Retiring() {
			if st.RetiringInto == into {
				return b, nil
			}
			return b, board.Invalid("state %q is already being retired into %q; finish that first", s, st.RetiringInto)
		}
		if target.Completion && !st.Completion {
			// A sweep carries machine provenance and so promotes nobody:
			// it would complete cards nobody finished and strand their
			// dependents in waiting_deps for ever.
			return b, board.Invalid("%q is a completion state and %q is not: moving cards into it would complete them without promoting their dependents; move them with card move first", into, s)
		}
		i := slices.IndexFunc(b.States, func(x board.State) bool { return x.Name == s })
		b.States[i].RetiringInto = into
		return b, nil
	}
	return a.sweepState(ctx, op, s, into, board.ReasonStateDelete, retire)
}

// sweepState is the one mechanism behind RenameState and DeleteState:
//
//  1. check that the board without from is valid, and refuse a bulk reopen
//     that a dependent outside waiting_deps forbids, before anything is
//     written;
//  2. mark from retiring into to (a compare-and-set on the definition);
//  3. move every card of from to to, each a compare-and-set on from;
//  4. re-list from for cards that entered it during the walk, a few times;
//  5. drop from from the definition once it is empty.
//
// A walk that cannot empty from (contended cards) leaves it retiring and
// says so; running the operation again resumes it.
func (a *Admin) sweepState(ctx context.Context, op, from, to string, reason board.Reason, retire func(board.Board) (board.Board, error)) (board.SweepReport, error) {
	rep := newReport(op)
	b, err := a.cfg.Store.LoadBoard(ctx)
	if err != nil {
		return rep, fmt.Errorf("%s: load board: %w", op, err)
	}
	mid, err := retire(b.Clone())
	if err != nil {
		return rep, fmt.Errorf("%s: %w", op, err)
	}
	if err := mid.Validate(); err != nil {
		return rep, fmt.Errorf("%s: the board during the move would be invalid: %w", op, err)
	}
	if err := drop(mid, from).Validate(); err != nil {
		return rep, fmt.Errorf("%s: the board afterwards would be invalid: %w", op, err)
	}
	src, _ := mid.State(from)
	dst, _ := mid.State(to)
	reopen := src.Terminal && !dst.Terminal
	if reopen {
		if err := a.checkBulkReopen(ctx, op, from, mid); err != nil {
			return rep, err
		}
	}
	if note, ok := wellKnown[from]; ok && from != to {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%q is a well-known state name: %s", from, note))
	}
	if a.cfg.DryRun {
		return a.previewState(ctx, rep, op, from, drop(mid, from))
	}
	if _, err := a.updateBoard(ctx, retire); err != nil {
		return rep, fmt.Errorf("%s: mark %q retiring: %w", op, from, err)
	}

	contended := map[string]bool{}
	for pass := 0; pass < stragglerPasses; pass++ {
		cards, err := a.cfg.Store.ListCards(ctx, board.ListCardsParams{State: from})
		if err != nil {
			return rep, fmt.Errorf("%s: list cards in %q: %w", op, from, err)
		}
		if len(cards) == 0 {
			break
		}
		if pass == 0 {
			rep.Cards = len(cards)
		}
		for i, c := range cards {
			o, err := a.moveCard(ctx, c.ID, from, to, reason, reopen)
			if err != nil {
				return rep, progress(op, c.ID, i, len(cards), err)
			}
			if pass == 0 {
				a.progressed(i+1, len(cards))
			}
			if o == outContended {
				contended[c.ID] = true
				continue
			}
			delete(contended, c.ID)
			if pass > 0 && o != outChanged {
				continue // already counted on the first pass
			}
			record(&rep, c.ID, o)
		}
	}
	for id := range contended {
		rep.Contended = append(rep.Contended, id)
	}
	slices.Sort(rep.Contended)
	left, err := a.cfg.Store.ListCards(ctx, board.ListCardsParams{State: from, Limit: 1})
	if err != nil {
		return rep, fmt.Errorf("%s: list cards in %q: %w", op, from, err)
	}
	if len(left) > 0 {
		cur, err := a.cfg.Store.LoadBoard(ctx)
		if err == nil {
			rep.Board = &cur
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("state %q still holds cards and stays retiring into %q; run the same command again to finish", from, to))
		return rep, nil
	}
	final, err := a.updateBoard(ctx, func(b board.Board) (board.Board, error) {
		if st, ok := b.State(from); ok && st.RetiringInto != to {
			return b, board.Invalid("state %q is no longer retiring into %q", from, to)
		}
		return drop(b, from), nil
	})
	if err != nil {
		return rep, fmt.Errorf("%s: drop %q from the board: %w", op, from, err)
	}
	rep.Board = &final
	return rep, nil
}

// previewState is a state sweep's dry run, once every check passed:
// the cards now in from, each one a card the sweep would move, and the
// board it would leave (after: from dropped). Nothing is written, not
// even the retiring mark.
func (a *Admin) previewState(ctx context.Context, rep board.SweepReport, op, from string, after board.Board) (board.SweepReport, error) {
	rep.DryRun = true
	cards, err := a.cfg.Store.ListCards(ctx, board.ListCardsParams{State: from})
	if err != nil {
		return rep, fmt.Errorf("%s: list cards in %q: %w", op, from, err)
	}
	rep.Cards = len(cards)
	for i, c := range cards {
		record(&rep, c.ID, outChanged)
		a.progressed(i+1, len(cards))
	}
	rep.Board = &after
	return rep, nil
}

// drop returns b without the named state.
func drop(b board.Board, name string) board.Board {
	b = b.Clone()
	b.States = slices.DeleteFunc(b.States, func(s board.State) bool { return s.Name == name })
	return b
}

// checkBulkReopen refuses, before anything is written, a move out of the
// terminal state from while a card there has a dependent outside
// waiting_deps — the rule Reopen applies to one card (DESIGN.md#reopen,
// board.Board.ReopenBlockedBy), applied to the whole batch so a refusal
// changes nothing at all.
func (a *Admin) checkBulkReopen(ctx context.Context, op, from string, b board.Board) error {
	cards, err := a.cfg.Store.ListCards(ctx, board.ListCardsParams{State: from})
	if err != nil {
		return fmt.Errorf("%s: list cards in %q: %w", op, from, err)
	}
	for i, c := range cards {
		deps, err := a.cfg.Store.Dependents(ctx, board.DependentsParams{ID: c.ID})
		if errors.Is(err, board.ErrNotFound) {
			continue
		}
		if err != nil {
			return progress(op, c.ID, i, len(cards), err)
		}
		for _, d := range deps {
			if err := b.ReopenBlockedBy(c.ID, d); err != nil {
				return fmt.Errorf("%s: a bulk reopen: %w", op, err)
			}
		}
	}
	return nil
}

// moveCard moves one card from → to, a compare-and-set on from. A card no
// longer in from has been moved on by someone else: nothing to do.
func (a *Admin) moveCard(ctx context.Context, id, from, to string, reason board.Reason, reopen bool) (outcome, error) {
	for attempt := 1; attempt <= a.cfg.Attempts; attempt++ {
		var changed bool
		err := a.write(ctx, id, attempt, func(ctx context.Context) error {
			m := board.MoveParams{Card: id, From: from, To: to, Reason: reason, Actor: a.cfg.Actor}
			if reopen {
				// Reopen honours a declared From as a compare-and-set;
				// a drifted card is refused and re-read below.
				err := a.cfg.Store.Reopen(ctx, m)
				changed = err == nil
				if errors.Is(err, board.ErrTransitionRejected) {
					return nil
				}
				return err
			}
			moved, err := a.cfg.Store.SetStateFrom(ctx, m)
			changed = moved.Changed
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
		c, err := a.cfg.Store.GetCard(ctx, board.GetCardParams{ID: id})
		if errors.Is(err, board.ErrNotFound) {
			return outGone, nil
		}
		if err != nil {
			return 0, err
		}
		if c.State != from {
			return outUnchanged, nil
		}
		if reopen {
			// Still in from and refused: a dependent left waiting_deps
			// after the batch check. The refusal stands for this card.
			return outContended, nil
		}
	}
	return outContended, nil
}

// updateBoard applies edit to the stored definition with a compare-and-set,
// re-reading and re-editing on a miss (bounded).
func (a *Admin) updateBoard(ctx context.Context, edit func(board.Board) (board.Board, error)) (board.Board, error) {
	for attempt := 1; attempt <= a.cfg.Attempts; attempt++ {
		cur, err := a.cfg.Store.LoadBoard(ctx)
		if err != nil {
			return board.Board{}, err
		}
		next, err := edit(cur.Clone())
		if err != nil {
			return board.Board{}, err
		}
		if next.Equal(cur) {
			return cur, nil
		}
		wctx, cancel := context.WithTimeout(ctx, a.cfg.WriteTimeout)
		set, err := a.cfg.Store.SetBoard(wctx, board.SetBoardParams{Expect: cur, Next: next})
		cancel()
		if err != nil {
			return board.Board{}, err
		}
		if set.Changed {
			return set.Board, nil
		}
	}
	return board.Board{}, fmt.Errorf("the board definition kept changing under %d attempts: %w", a.cfg.Attempts, board.ErrTransitionRejected)
}
