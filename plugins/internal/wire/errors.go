package wire

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// sentinels lists every error identity that crosses the boundary, with its
// wire name. Order does not matter: an error is sent with every kind it
// matches, so a joined or doubly wrapped error keeps all its identities.
var sentinels = []struct {
	err  error
	kind storepb.ErrorKind
}{
	{board.ErrNotFound, storepb.ErrorKind_ERROR_KIND_NOT_FOUND},
	{board.ErrClaimConflict, storepb.ErrorKind_ERROR_KIND_CLAIM_CONFLICT},
	{board.ErrTransitionRejected, storepb.ErrorKind_ERROR_KIND_TRANSITION_REJECTED},
	{board.ErrTerminalStateExit, storepb.ErrorKind_ERROR_KIND_TERMINAL_STATE_EXIT},
	{board.ErrWaitingOnBlockers, storepb.ErrorKind_ERROR_KIND_WAITING_ON_BLOCKERS},
	{board.ErrEventsPruned, storepb.ErrorKind_ERROR_KIND_EVENTS_PRUNED},
	{board.ErrInvalidArgument, storepb.ErrorKind_ERROR_KIND_INVALID_ARGUMENT},
	{board.ErrAlreadyExists, storepb.ErrorKind_ERROR_KIND_ALREADY_EXISTS},
	{board.ErrOutcomeUnknown, storepb.ErrorKind_ERROR_KIND_OUTCOME_UNKNOWN},
	{context.Canceled, storepb.ErrorKind_ERROR_KIND_CANCELED},
	{context.DeadlineExceeded, storepb.ErrorKind_ERROR_KIND_DEADLINE_EXCEEDED},
}

// storeErrorToPB describes err for the wire: its message, every sentinel it
// matches and, for a claim conflict, the holder and epoch.
func storeErrorToPB(err error) *storepb.StoreError {
	if err == nil {
		return nil
	}
	se := &storepb.StoreError{Message: err.Error()}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			se.Kinds = append(se.Kinds, s.kind)
		}
	}
	if ce, ok := board.AsClaimConflict(err); ok {
		se.Conflict = &storepb.Conflict{Card: ce.Card, Holder: ce.Holder, Epoch: ce.Epoch}
	}
	return se
}

// ErrorFromPB rebuilds a store error on the agent's side. The message is
// the store's own, unchanged; errors.Is matches every sentinel the original
// matched, and board.AsClaimConflict finds the holder and epoch.
func ErrorFromPB(se *storepb.StoreError) error {
	if se == nil {
		return nil
	}
	re := &remoteError{msg: se.GetMessage()}
	if c := se.GetConflict(); c != nil {
		// The conflict value carries the ErrClaimConflict identity itself.
		re.errs = append(re.errs, &board.ClaimConflictError{Card: c.GetCard(), Holder: c.GetHolder(), Epoch: c.GetEpoch()})
	}
	for _, k := range se.GetKinds() {
		if k == storepb.ErrorKind_ERROR_KIND_CLAIM_CONFLICT && se.GetConflict() != nil {
			continue
		}
		for _, s := range sentinels {
			if s.kind == k {
				re.errs = append(re.errs, s.err)
			}
		}
	}
	return re
}

// remoteError is a store error that crossed the plugin boundary.
type remoteError struct {
	msg  string
	errs []error
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.errs }

// statusCode picks the gRPC code that best names a store error, for logs
// and for any gRPC-level tooling; the agent itself reads the details.
func statusCode(err error) codes.Code {
	switch {
	case errors.Is(err, board.ErrClaimConflict):
		return codes.Aborted
	case errors.Is(err, board.ErrTransitionRejected):
		return codes.FailedPrecondition
	case errors.Is(err, board.ErrAlreadyExists):
		return codes.AlreadyExists
	case errors.Is(err, board.ErrInvalidArgument):
		return codes.InvalidArgument
	case errors.Is(err, board.ErrNotFound):
		return codes.NotFound
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, board.ErrOutcomeUnknown):
		return codes.Unavailable
	}
	return codes.Unknown
}

// ToStatus turns a store error into a gRPC status error carrying a
// StoreError detail. A store that cannot do what was asked
// (errors.ErrUnsupported) answers as a plugin without the method does,
// Unimplemented, so the agent reads both alike.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, errors.ErrUnsupported) {
		return status.Error(codes.Unimplemented, err.Error())
	}
	st, derr := status.New(statusCode(err), err.Error()).WithDetails(storeErrorToPB(err))
	if derr != nil {
		// Only a broken protobuf runtime fails here; the message still goes.
		return status.Error(statusCode(err), err.Error())
	}
	return st.Err()
}
