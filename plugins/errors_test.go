package plugins

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// TestPluginSideDeadlineIsTheCallers: the plugin runs a call under its own
// copy of the caller's deadline, which may fire just before the caller's.
// The cancellation it sends back is the caller's deadline passing, not a
// broken plugin: reported as DeadlineExceeded, and not a reason to replace
// the plugin. A cancellation with no deadline near stays a call failure.
func TestPluginSideDeadlineIsTheCallers(t *testing.T) {
	t.Parallel()
	for _, code := range []codes.Code{codes.Canceled, codes.DeadlineExceeded} {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		err := callError(ctx, "GetCard", status.Error(code, "stream terminated by RST_STREAM with error code: CANCEL"))
		cancel()
		if brokenPlugin(err) {
			t.Errorf("%v near the deadline: %v, want a failure the caller caused", code, err)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, board.ErrOutcomeUnknown) {
			t.Errorf("%v near the deadline: %v, want DeadlineExceeded and ErrOutcomeUnknown", code, err)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	err := callError(ctx, "GetCard", status.Error(codes.Canceled, "stream terminated by RST_STREAM with error code: CANCEL"))
	if !brokenPlugin(err) || !errors.Is(err, board.ErrOutcomeUnknown) {
		t.Errorf("a cancellation an hour before the deadline: %v, want a plugin failure with outcome unknown", err)
	}
}

// TestOnlyTransportFailuresCondemnThePlugin pins what callError takes for a
// broken plugin: only a transport that failed. Whatever a request can
// provoke — a string gRPC cannot encode (here or in the plugin's answer),
// a message the plugin could not decode, one over the size limit, a plain
// RPC error — is about that call and must never get the plugin replaced:
// any peer of the socket could otherwise kill the store at will.
func TestOnlyTransportFailuresCondemnThePlugin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		err    error
		broken bool
	}{
		{"connection closed", status.Error(codes.Unavailable, "error reading from server: EOF"), true},
		{"connection closing", status.Error(codes.Unavailable, "transport is closing"), true},
		{"stream reset by the plugin", status.Error(codes.Internal, "stream terminated by RST_STREAM with error code: PROTOCOL_ERROR"), true},
		{"stream without a status", status.Error(codes.Internal, "server closed the stream without sending trailers"), true},
		{"cancelled by the plugin, not the caller", status.Error(codes.Canceled, "stream terminated by RST_STREAM with error code: CANCEL"), true},
		{"not a gRPC status", errors.New("unexpected EOF"), true},

		{"request not UTF-8", status.Error(codes.Internal, "grpc: error while marshaling: string field contains invalid UTF-8"), false},
		{"request not decodable by the plugin", status.Error(codes.Internal, "grpc: error unmarshalling request: string field contains invalid UTF-8"), false},
		{"answer not decodable here", status.Error(codes.Internal, "grpc: failed to unmarshal the received message: string field contains invalid UTF-8"), false},
		{"answer over the size limit", status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5000000 vs. 4194304)"), false},
		{"request over the size limit", status.Error(codes.ResourceExhausted, "grpc: trying to send message larger than max (5000000 vs. 4194304)"), false},
		{"plain RPC error", status.Error(codes.Unknown, "the plugin said no"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
			defer cancel()
			err := callError(ctx, "GetCard", tc.err)
			if got := brokenPlugin(err); got != tc.broken {
				t.Errorf("brokenPlugin(callError(%v)) = %v, want %v (%v)", tc.err, got, tc.broken, err)
			}
			if !errors.Is(err, board.ErrOutcomeUnknown) {
				t.Errorf("callError(%v) = %v, want it to wrap ErrOutcomeUnknown: the call was sent, or may have been", tc.err, err)
			}
		})
	}
}

// rawPair serves store through go-plugin's in-process gRPC pair and
// returns the agent's raw connection to it, with no sendableConn in front.
func rawPair(t *testing.T, store board.Store) *grpc.ClientConn {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{wire.PluginName: bothEnds(store)})
	t.Cleanup(func() { client.Close() })
	return client.Conn
}

// TestUnencodableRequestsAreTheCallers checks both halves of the fix with
// gRPC's real errors: a request gRPC cannot encode, sent past the pre-flight
// check, fails with an error callError does not take for a broken plugin;
// and through the agent's end (sendableConn) the same request is refused as
// the store refuses a malformed name, ErrInvalidArgument, without reaching
// the plugin at all.
func TestUnencodableRequestsAreTheCallers(t *testing.T) {
	t.Parallel()
	var reached []string
	store := &scripted{
		getCard: func(_ context.Context, id string) (board.Card, error) {
			reached = append(reached, id)
			return board.Card{}, board.NotFound("card", id)
		},
		renewClaims: func(_ context.Context, holds []board.Hold, _ time.Duration) ([]board.RenewResult, error) {
			for _, h := range holds {
				reached = append(reached, h.Card)
			}
			return nil, nil
		},
		listCards: func(_ context.Context, f board.ListCardsParams) ([]board.Card, error) {
			reached = append(reached, f.State)
			return nil, nil
		},
	}
	conn := rawPair(t, store)

	_, err := storepb.NewStoreClient(conn).GetCard(t.Context(), &storepb.GetCardRequest{Id: "\xff"})
	if err == nil {
		t.Fatal("gRPC sent a string that is not UTF-8; the case tests nothing")
	}
	if cerr := callError(t.Context(), "GetCard", err); brokenPlugin(cerr) {
		t.Errorf("gRPC's own refusal to encode the request (%v) was taken for a broken plugin: %v", err, cerr)
	}

	rs := newRemoteStore(conn, wire.ProtocolVersion)
	calls := []struct {
		name string
		call func() error
		say  string
	}{
		{"GetCard", func() error { _, err := rs.GetCard(t.Context(), board.GetCardParams{ID: "c1\xff"}); return err }, "id"},
		{"ListCards", func() error { _, err := rs.ListCards(t.Context(), board.ListCardsParams{State: "\xc0"}); return err }, "state"},
		{"RenewClaims", func() error {
			_, err := rs.RenewClaims(t.Context(), board.RenewClaimsParams{Holds: []board.Hold{
				{Card: "ok", Token: board.ClaimToken{Marker: "h-42", Epoch: 1}},
				{Card: "\xed\xa0\x80", Token: board.ClaimToken{Marker: "h-42", Epoch: 1}},
			}, Lease: time.Second})
			return err
		}, "holds[1].card"},
		{"RenewClaims marker", func() error {
			_, err := rs.RenewClaims(t.Context(), board.RenewClaimsParams{Holds: []board.Hold{{Card: "ok", Token: board.ClaimToken{Marker: "h\xff-42", Epoch: 1}}}, Lease: time.Second})
			return err
		}, "holds[0].token.marker"},
	}
	for _, c := range calls {
		err := c.call()
		if !errors.Is(err, board.ErrInvalidArgument) || errors.Is(err, board.ErrOutcomeUnknown) || brokenPlugin(err) {
			t.Errorf("%s with a string that is not UTF-8: %v, want ErrInvalidArgument and nothing else", c.name, err)
		}
		if err != nil && !strings.Contains(err.Error(), c.say+" is not valid UTF-8") {
			t.Errorf("%s: %q does not name the field %s", c.name, err, c.say)
		}
	}
	if len(reached) != 0 {
		t.Errorf("the plugin's store was called with %q; a request that cannot be encoded must not be sent", reached)
	}
	// A well-formed request still goes through.
	if _, err := rs.GetCard(t.Context(), board.GetCardParams{ID: "café"}); !errors.Is(err, board.ErrNotFound) {
		t.Errorf("GetCard(café) = %v, want the store's ErrNotFound", err)
	}
}

// TestAnswerTheAgentCannotReadKeepsThePlugin: a store holding a string that
// is not UTF-8 (written before anything refused it) cannot have its answer
// encoded by the plugin. The call fails, outcome unknown, but the plugin is
// healthy and must not be replaced for it: restarting would change nothing
// but the claims' renewals.
func TestAnswerTheAgentCannotReadKeepsThePlugin(t *testing.T) {
	t.Parallel()
	rs := newRemoteStore(rawPair(t, &scripted{getCard: func(_ context.Context, id string) (board.Card, error) {
		return board.Card{ID: id, Title: "legacy \xff title", State: board.StateReady}, nil
	}}), wire.ProtocolVersion)
	_, err := rs.GetCard(t.Context(), board.GetCardParams{ID: "c1"})
	if err == nil {
		t.Fatal("an answer holding a string that is not UTF-8 crossed the boundary; the case tests nothing")
	}
	if brokenPlugin(err) {
		t.Errorf("an answer the plugin could not encode was taken for a broken plugin: %v", err)
	}
}

// TestAnUnimplementedVerbIsUnsupported: a verb a plugin does not serve
// (built before it existed) is told apart from the store failing, as
// errors.ErrUnsupported, so a caller with another way to ask (the
// metrics' card count, which can list instead) takes it.
func TestAnUnimplementedVerbIsUnsupported(t *testing.T) {
	err := callError(t.Context(), "CountCards", status.Error(codes.Unimplemented, "unknown method CountCards"))
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("callError(Unimplemented) = %v, want errors.ErrUnsupported", err)
	}
	if errors.Is(err, board.ErrOutcomeUnknown) {
		t.Errorf("callError(Unimplemented) = %v: a refused method ran nothing, its outcome is known", err)
	}
	if err := callError(t.Context(), "GetCard", status.Error(codes.Unavailable, "gone")); errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("callError(Unavailable) = %v, reads as unsupported", err)
	}
	// A plugin whose store answers that it cannot count reads the same.
	sent := wire.ToStatus(fmt.Errorf("mystore: count cards: %w", errors.ErrUnsupported))
	if err := callError(t.Context(), "CountCards", sent); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("callError(ToStatus(ErrUnsupported)) = %v, want errors.ErrUnsupported", err)
	}
}
