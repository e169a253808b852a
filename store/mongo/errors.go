package mongostore

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/leasekeeper/leasekeeper/board"
)

var (
	// ErrCorruptDocument: a stored document has a field of the wrong type
	// (written by something other than this package). The concrete error is
	// a *DocumentError naming the document and the field.
	ErrCorruptDocument = errors.New("mongostore: corrupt document")
	// ErrContention: a compare-and-set kept missing because other writers
	// kept changing the same document. Nothing was written by this call.
	ErrContention = errors.New("mongostore: too much write contention")
	// ErrStampCollision: two events were given one sequence number, which
	// only a server whose write stamps are not unique can cause
	// (DESIGN.md#event-log: FerretDB after a restart within the second of
	// its last stamp, or two FerretDB instances on one database). Nothing
	// is dropped silently: the publish or the read that finds it fails.
	ErrStampCollision = errors.New("mongostore: sequence number collision")
)

// DocumentError names a document that cannot be read as what it should be.
type DocumentError struct {
	Collection string
	ID         string
	Field      string
	Problem    string
}

func (e *DocumentError) Error() string {
	return fmt.Sprintf("mongostore: %s %q: field %q: %s", e.Collection, e.ID, e.Field, e.Problem)
}

// Is makes errors.Is(err, ErrCorruptDocument) true.
func (e *DocumentError) Is(target error) bool { return target == ErrCorruptDocument }

// writeErr classifies a failed write. A network error or a timeout after
// the request may have been sent leaves the outcome unknown: callers such as
// the heartbeat must not count it as done (board.ErrOutcomeUnknown).
func writeErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if mongo.IsNetworkError(err) || mongo.IsTimeout(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w: %w", what, board.ErrOutcomeUnknown, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
