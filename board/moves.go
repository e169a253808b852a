package board

import (
	"fmt"
	"slices"
)

// The decisions a store makes about a state move once it has read the card.
// They depend only on the board and on what was read, so every store makes
// them here; reading the card and writing the move atomically is the
// store's own business.

// InitialState is the state CreateCard puts a new card in: the requested
// one when set, else the first pool state — or waiting_deps when a blocker
// is not complete yet and the board has that state (a custom board that
// drops it creates the card in the pool, blockers or not).
func (b Board) InitialState(requested string, blockersComplete bool) string {
	if requested != "" {
		return requested
	}
	if !blockersComplete && b.Has(StateWaitingDeps) {
		return StateWaitingDeps
	}
	return b.FirstPool()
}

// SinkExit refuses leaving a terminal state through the SetState family
// (DESIGN.md#sinks: only Reopen leaves a sink). It returns an error wrapping
// ErrTerminalStateExit when from is terminal and to is not, and nil
// otherwise: terminal → terminal is an ordinary refiling.
func (b Board) SinkExit(card, from, to string) error {
	if b.IsTerminal(from) && !b.IsTerminal(to) {
		return fmt.Errorf("card %q: %s → %s: %w", card, from, to, ErrTerminalStateExit)
	}
	return nil
}

// DecideMove decides a move of the SetState family for a card read in
// state cur. from, when set, is the declared source of a compare-and-set
// (SetStateFrom, or a SetStateOwnedParams with From): a terminal source is refused
// even when the card has drifted, because the caller asked to leave a sink,
// which is wrong whatever the card holds now; a card no longer in from is
// drift, not an error. Without a declared source, leaving a terminal state
// is refused. move is false when there is nothing to write (drift, or the
// card is already in to).
func (b Board) DecideMove(card, cur, from, to string) (move bool, err error) {
	if from != "" {
		if err := b.SinkExit(card, from, to); err != nil {
			return false, err
		}
		if cur != from {
			return false, nil
		}
	}
	if err := b.SinkExit(card, cur, to); err != nil {
		return false, err
	}
	return cur != to, nil
}

// ReopenInto refuses a Reopen whose target is a terminal state: a reopen
// leaves a sink for a working state (DESIGN.md#reopen).
func ReopenInto(card string, target State) error {
	if target.Terminal {
		return fmt.Errorf("card %q: reopen into terminal state %q: %w", card, target.Name, ErrTransitionRejected)
	}
	return nil
}

// CheckReopen decides a Reopen of a card read in state cur. A declared
// source from makes the reopen a compare-and-set on it (the bulk reopen of
// a state sweep walks an ageing snapshot): a card no longer in from is
// refused. A card that is not in a terminal state has nothing to reopen.
// Both refusals wrap ErrTransitionRejected.
func (b Board) CheckReopen(card, cur, from string) error {
	if from != "" && cur != from {
		return fmt.Errorf("card %q: reopen from %q, but the card is in %q: %w", card, from, cur, ErrTransitionRejected)
	}
	if !b.IsTerminal(cur) {
		return fmt.Errorf("card %q: reopen from non-terminal state %q: %w", card, cur, ErrTransitionRejected)
	}
	return nil
}

// ReopenBlockedBy reports whether the dependent d keeps card in its sink
// (DESIGN.md#reopen): d names card among its blockers and is anywhere but
// waiting_deps. A dependent outside waiting_deps has been let go on the
// strength of its blockers being complete — promoted when the last of them
// completed (whichever one that was), moved on by hand, or finished since —
// and reopening card would leave it past a blocker that is no longer
// complete. A dependent still in waiting_deps does not hold card: it is
// looked at again when card completes. The error wraps
// ErrTransitionRejected and says how to clear the refusal; nil means d
// does not block the reopen.
func (b Board) ReopenBlockedBy(card string, d Card) error {
	if !slices.Contains(d.DependsOn, card) || d.State == StateWaitingDeps {
		return nil
	}
	how := "move it back to " + StateWaitingDeps + " first (card move, or card reopen when it is in a terminal state)"
	if !b.Has(StateWaitingDeps) {
		how = "this board has no " + StateWaitingDeps + " state, so a card with dependents cannot be reopened"
	}
	return fmt.Errorf("card %q: dependent %q names it as a blocker and is in %q, not %s: %s: %w",
		card, d.ID, d.State, StateWaitingDeps, how, ErrTransitionRejected)
}

// Promotes reports whether a move into to under reason completes the card,
// so its dependents waiting on their blockers are looked at for promotion.
// A move under machine provenance promotes nobody (DESIGN.md#machine-reasons: a
// machine-caused event fires no effect, the promotion included): a state
// sweep renaming the completion column moves every card in it, and none of
// those moves completes anything.
func (b Board) Promotes(to string, reason Reason) bool {
	return b.IsCompletion(to) && !IsMachineReason(reason)
}

// Complete reports whether every one of states is a completion state (true
// for none): whether a card whose blockers are in those states is
// unblocked. A new card with an incomplete blocker starts in waiting_deps
// (InitialState); a waiting dependent is promoted to the first pool state,
// reason unblocked — not a machine reason: the cascade of closing a blocker
// keeps its triggers (DESIGN.md#machine-reasons) — once this holds.
func (b Board) Complete(states []string) bool {
	for _, s := range states {
		if !b.IsCompletion(s) {
			return false
		}
	}
	return true
}

// StampedReason is the provenance a store records for the move. A move by
// a recovery (reaper:) marker is stamped ReasonWatchdog, so no effect fires
// on a machine decision — except the descriptive verdicts run_finished and
// run_failed, which the watchdog merely writes down for a dead owner and
// which must fire the downstream chain as for a living one (DESIGN.md#verdict-provenance).
func (m SetStateOwnedParams) StampedReason() Reason {
	if !IsRecoveryMarker(m.Token.Marker) {
		return m.Reason
	}
	if m.Reason == ReasonRunFinished || m.Reason == ReasonRunFailed || m.Reason == ReasonRetry {
		return m.Reason
	}
	return ReasonWatchdog
}
