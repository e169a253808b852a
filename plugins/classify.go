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
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
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

// deadlineSkew bounds how far apart the plugin's copy of a deadline and
// the caller's own can fire: gRPC sends the remaining time, so they differ
// by the transit and the scheduling of two processes.
const deadlineSkew = time.Second

// callError turns the error of one RPC into what the agent sees. An error
// the store returned comes back with its identity (see wire.ErrorFromPB); so
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
				return wire.ErrorFromPB(se)
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
