package board

import (
	"errors"
	"fmt"
)

// Sentinel errors of the store contract. Every store wraps them with %w so
// errors.Is works on the caller's side of any boundary (plugin, socket).
var (
	// ErrNotFound: the card or run does not exist.
	ErrNotFound = errors.New("not found")
	// ErrClaimConflict: the claim is held by someone else, or the caller's
	// token was superseded. Use AsClaimConflict to learn the current holder.
	ErrClaimConflict = errors.New("claim conflict")
	// ErrTransitionRejected: a state transition the board does not allow.
	ErrTransitionRejected = errors.New("transition rejected")
	// ErrTerminalStateExit: an attempt to leave a terminal state through the
	// SetState family. It wraps ErrTransitionRejected so older matchers keep
	// working (DESIGN.md#sinks).
	ErrTerminalStateExit = fmt.Errorf("terminal state exit: use reopen: %w", ErrTransitionRejected)
	// ErrWaitingOnBlockers: a claim by id (Claim, Start of a named card) of
	// a card that waits in waiting_deps for its blockers to complete; the
	// message names the blockers that are not complete. It wraps
	// ErrTransitionRejected so older matchers keep working
	// (DESIGN.md#lifecycle-refusals).
	ErrWaitingOnBlockers = fmt.Errorf("waiting on blockers: %w", ErrTransitionRejected)
	// ErrInvalidArgument: malformed input (unknown state, bad marker, zero
	// token, bad label, duplicate id, dependency cycle...). Nothing was written.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrAlreadyExists: a card with that id exists. Wraps ErrInvalidArgument.
	ErrAlreadyExists = fmt.Errorf("already exists: %w", ErrInvalidArgument)
	// ErrOutcomeUnknown: the store could not say whether a write landed (a
	// plugin crashed mid-call, a connection dropped after sending). Callers
	// must treat it as "not confirmed": a heartbeat never counts it as renewed.
	ErrOutcomeUnknown = errors.New("outcome unknown")
)

// ClaimConflictError is the concrete error behind ErrClaimConflict: it names
// the card, the current holder and the current epoch, so a caller can tell
// "someone else holds it" from "my token is stale" and log who won.
type ClaimConflictError struct {
	Card   string
	Holder string // current claim marker; empty when the card is free
	Epoch  int64  // current claim epoch
}

func (e *ClaimConflictError) Error() string {
	holder := e.Holder
	if holder == "" {
		holder = "nobody"
	}
	return fmt.Sprintf("claim conflict on card %q: held by %s at epoch %d", e.Card, holder, e.Epoch)
}

// Is makes errors.Is(err, ErrClaimConflict) true.
func (e *ClaimConflictError) Is(target error) bool { return target == ErrClaimConflict }

// Conflict builds a ClaimConflictError.
func Conflict(card, holder string, epoch int64) error {
	return &ClaimConflictError{Card: card, Holder: holder, Epoch: epoch}
}

// AsClaimConflict extracts the holder and epoch from a conflict error.
func AsClaimConflict(err error) (*ClaimConflictError, bool) {
	var ce *ClaimConflictError
	ok := errors.As(err, &ce)
	return ce, ok
}

// Invalid builds an ErrInvalidArgument error with a message.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// NotFound builds an ErrNotFound error naming what was missing.
func NotFound(kind, id string) error {
	return fmt.Errorf("%s %q: %w", kind, id, ErrNotFound)
}

// MovedSince is the refusal of a write whose precondition named the state
// the card was judged in, when the card has left it since. It wraps
// ErrTransitionRejected.
func MovedSince(card, judged, now string) error {
	return fmt.Errorf("card %q: moved from %q to %q since it was judged: %w", card, judged, now, ErrTransitionRejected)
}
