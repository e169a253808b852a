package plugins

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// Errors of the plugin boundary itself. Errors of the store behind it keep
// their board sentinels.
var (
	// ErrUnavailable: the store plugin is not running (it crashed and is
	// being restarted, or the proxy is closed). The call was not sent, so
	// nothing was written.
	ErrUnavailable = errors.New("store plugin unavailable")
	// ErrStart: the plugin could not be started (binary missing, not a
	// leasekeeper store plugin, another protocol version, store failed to
	// open).
	ErrStart = errors.New("store plugin failed to start")
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

// errorFromPB rebuilds a store error on the agent's side. The message is
// the store's own, unchanged; errors.Is matches every sentinel the original
// matched, and board.AsClaimConflict finds the holder and epoch.
func errorFromPB(se *storepb.StoreError) error {
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

// toStatus turns a store error into a gRPC status error carrying a
// StoreError detail.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	st, derr := status.New(statusCode(err), err.Error()).WithDetails(storeErrorToPB(err))
	if derr != nil {
		// Only a broken protobuf runtime fails here; the message still goes.
		return status.Error(statusCode(err), err.Error())
	}
	return st.Err()
}

// deadlineSkew bounds how far apart the plugin's copy of a deadline and
// the caller's own can fire: gRPC sends the remaining time, so they differ
// by the transit and the scheduling of two processes.
const deadlineSkew = time.Second

// callError turns the error of one RPC into what the agent sees. An error
// the store returned comes back with its identity (see errorFromPB); so
// does a request this side refused to send (sendableConn). Any other
// failure happened to the call itself, after the request may have been
// sent: its outcome is unknown.
//
// Only a failure of the transport says the plugin is broken (see
// transportFailure), and only it gets the plugin replaced. Every other
// failed call — the plugin answered with an RPC error, the request or the
// answer could not be encoded, a message was over the size limit — is
// about that call: a peer of the socket can provoke it at will, and a
// restart would cost every live claim its renewals and fix nothing.
func callError(ctx context.Context, verb string, err error) error {
	st, ok := status.FromError(err)
	if ok {
		for _, d := range st.Details() {
			if se, isStore := d.(*storepb.StoreError); isStore {
				return errorFromPB(se)
			}
		}
		if st.Code() == codes.Unimplemented {
			// The server refused the method before running anything.
			return fmt.Errorf("store plugin: %s: not implemented by this plugin (built for another protocol revision?): %s: %w", verb, st.Message(), errors.ErrUnsupported)
		}
	}
	if ok && (st.Code() == codes.DeadlineExceeded || st.Code() == codes.Canceled) {
		// The plugin runs the call under its own copy of the caller's
		// deadline, which can fire a moment before the caller's: its
		// cancellation then arrives while ctx is still live. That is the
		// caller's deadline, not a broken plugin; wait the moment out so
		// the error says so and the plugin is not replaced for it.
		if dl, has := ctx.Deadline(); has && time.Until(dl) < deadlineSkew {
			<-ctx.Done()
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		return &callFailure{err: fmt.Errorf("store plugin: %s: interrupted by the caller while in flight (%w): %w: the write may or may not have landed",
			verb, cerr, board.ErrOutcomeUnknown)}
	}
	if !ok || transportFailure(st) {
		msg := err.Error()
		if ok {
			msg = st.Message()
		}
		return &callFailure{broken: true, err: fmt.Errorf("store plugin: %s: connection to the plugin failed mid-call (%s): %w: the write may or may not have landed",
			verb, msg, board.ErrOutcomeUnknown)}
	}
	return &callFailure{err: fmt.Errorf("store plugin: %s: the call failed without an answer from the store (%s: %s): %w: the write may or may not have landed",
		verb, st.Code(), st.Message(), board.ErrOutcomeUnknown)}
}

// transportFailure reports whether a failed call's status says the
// transport to the plugin broke: the connection is gone (Unavailable: the
// process died, its socket closed, the connection is closing), or the
// plugin's end reset or abandoned the stream — a cancellation the caller
// did not ask for (callError rules out the caller's own first), or an
// HTTP/2 stream reset or a stream ended without a status. None of these can
// come from what a request carries. gRPC's other Internal errors can:
// "grpc: error while marshaling" is a request (or an answer) that cannot be
// encoded, "grpc: error unmarshalling request" one the plugin could not
// decode; those, like ResourceExhausted (a message over the size limit) and
// Unknown, leave the plugin running.
func transportFailure(st *status.Status) bool {
	switch st.Code() {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded:
		return true
	case codes.Internal:
		msg := st.Message()
		return strings.HasPrefix(msg, "stream terminated by RST_STREAM") ||
			strings.HasPrefix(msg, "server closed the stream without sending trailers")
	}
	return false
}

// classified is the connection under the store's verbs: every call that
// fails returns what callError makes of its error, so the verbs, and the
// Proxy's supervisor above them, see errors already classified.
type classified struct {
	grpc.ClientConnInterface
}

func (c classified) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if err := c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...); err != nil {
		return callError(ctx, path.Base(method), err)
	}
	return nil
}

// callFailure is a call that failed between the agent and the store, not
// in the store. broken: the transport to the plugin failed, so the proxy
// replaces the plugin.
type callFailure struct {
	broken bool
	err    error
}

func (e *callFailure) Error() string { return e.err.Error() }
func (e *callFailure) Unwrap() error { return e.err }

// brokenPlugin reports whether err says the plugin itself failed.
func brokenPlugin(err error) bool {
	var cf *callFailure
	return errors.As(err, &cf) && cf.broken
}
