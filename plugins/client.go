package plugins

//go:generate go run ../internal/storegen -layer host -root ..

import (
	"context"
	"fmt"
	"path"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// verbs are the board.Store verbs as RPCs to a store plugin, one RPC per
// verb. Each hands the caller's ctx to the RPC: its deadline reaches the
// plugin, and the plugin's handler is cancelled when it is cancelled. The
// connection under them classifies every failed call (classified), so a
// verb returns the error it is given: remoteStore and Proxy share them.
type verbs struct {
	rpc storepb.StoreClient
}

// remoteStore is a board.Store over one connection to a store plugin: the
// verbs, carried on the Calls stream with the calls made at the same time
// (callConn), or on their own with protocol 3.
type remoteStore struct {
	*verbs
	calls *callConn // nil with protocol 3
	// conn is the classified connection under the verbs, for the Proxy's
	// supervisor to call through.
	conn grpc.ClientConnInterface

	mu     sync.Mutex
	traits board.Traits
}

var _ board.Store = (*remoteStore)(nil)

// newRemoteStore is the store over conn's Calls stream (protocol 4 and
// later), speaking protocol version.
func newRemoteStore(conn grpc.ClientConnInterface, version int) *remoteStore {
	cc := newCallConn(conn)
	rs := newUnaryRemoteStore(cc, version)
	rs.calls = cc
	return rs
}

// newUnaryRemoteStore sends every call as its own RPC on conn (protocol 3;
// and protocol 4 and later under newRemoteStore's Calls stream).
func newUnaryRemoteStore(conn grpc.ClientConnInterface, version int) *remoteStore {
	c := versionGuard{classified{sendableConn{conn}}, version}
	return &remoteStore{verbs: newVerbs(c), conn: c}
}

// versionGuard refuses, before it is sent, a request the plugin's
// negotiated protocol cannot carry whole: a retry policy, a retryable
// verdict or a retry's backoff to a plugin from before the retry policy
// (DESIGN.md#retries), a Prune or a DeleteCard to one from before retention
// (DESIGN.md#retention), and a ClaimNext or a Start that routes by labels
// to one from before labels (DESIGN.md#label-routing), which would take the
// oldest card of all. It sits under the Proxy's verbs too (the supervisor
// calls through remoteStore.conn), so a plugin replaced by an older build
// is caught on its first such call.
type versionGuard struct {
	grpc.ClientConnInterface
	version int
}

func (g versionGuard) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if g.version < wire.RetryProtocolVersion {
		if what := retryWrite(args); what != "" {
			return fmt.Errorf("store plugin: %s: %w", path.Base(method), board.Invalid(
				"the plugin speaks store protocol %d, from before the retry policy (protocol %d), and would drop %s: rebuild it against this leasekeeper release; nothing was sent",
				g.version, wire.RetryProtocolVersion, what))
		}
	}
	if g.version < wire.RetentionProtocolVersion {
		switch args.(type) {
		case *storepb.PruneRequest, *storepb.DeleteCardRequest:
			return fmt.Errorf("store plugin: %s: %w", path.Base(method), board.Invalid(
				"the plugin speaks store protocol %d, from before retention (protocol %d), and cannot prune or delete cards: rebuild it against this leasekeeper release; nothing was sent",
				g.version, wire.RetentionProtocolVersion))
		}
	}
	if g.version < wire.LabelsProtocolVersion {
		var labels []string
		switch r := args.(type) {
		case *storepb.ClaimNextRequest:
			labels = r.GetLabels()
		case *storepb.StartRequest:
			labels = r.GetLabels()
		}
		if len(labels) > 0 {
			return fmt.Errorf("store plugin: %s: %w", path.Base(method), board.Invalid(
				"the plugin speaks store protocol %d, from before routing by labels (protocol %d), and would ignore the labels %q: rebuild it against this leasekeeper release; nothing was sent",
				g.version, wire.LabelsProtocolVersion, labels))
		}
	}
	if err := g.ClientConnInterface.Invoke(ctx, method, args, reply, opts...); err != nil {
		return err
	}
	if g.version < wire.RetryProtocolVersion {
		// A plugin from before the retry policy keeps no attempts
		// counter, and cannot give a card a fresh set either: its cards'
		// runs are their attempts, the count the run ceiling had before
		// the policy made it max_attempts (DESIGN.md#retries). Read as 0,
		// the ceiling would never be reached.
		if m, ok := reply.(proto.Message); ok {
			runsAsAttempts(m.ProtoReflect())
		}
	}
	return nil
}

// runsAsAttempts sets every card m holds, at any depth, to count its runs
// as its attempts (versionGuard.Invoke).
func runsAsAttempts(m protoreflect.Message) {
	if c, ok := m.Interface().(*storepb.Card); ok {
		c.Attempts = max(c.GetAttempts(), int64(len(c.GetRuns().GetValues())))
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil || fd.IsMap():
		case fd.IsList():
			for i, l := 0, v.List(); i < l.Len(); i++ {
				runsAsAttempts(l.Get(i).Message())
			}
		default:
			runsAsAttempts(v.Message())
		}
		return true
	})
}

func newVerbs(conn grpc.ClientConnInterface) *verbs {
	return &verbs{rpc: storepb.NewStoreClient(conn)}
}

// load is the first round trip, the one that proves the plugin serves the
// store (its reply carries the stored board): it reads the traits the
// plugin declares.
func (s *remoteStore) load(ctx context.Context) error {
	r, err := s.rpc.Board(ctx, &storepb.BoardRequest{})
	if err != nil {
		return err
	}
	t := r.GetTraits()
	s.mu.Lock()
	s.traits = board.Traits{Shared: t.GetShared(), ServerClock: t.GetServerClock(), Outbox: t.GetOutbox()}
	s.mu.Unlock()
	return nil
}

// Traits are what the plugin declared in its first Board reply.
func (s *remoteStore) Traits() board.Traits {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.traits
}

// Close ends the Calls stream, if any. The connection belongs to the
// plugin client, and the plugin process closes its store when it is
// stopped (Proxy.Close).
func (s *remoteStore) Close() error {
	if s.calls != nil {
		s.calls.close()
	}
	return nil
}

// retryWrite names what of the retry policy (DESIGN.md#retries) args
// carries that a plugin from before protocol 7 would silently drop; ""
// when nothing. The guard that sits under every call refuses those
// (versionGuard.Invoke).
func retryWrite(args any) string {
	switch r := args.(type) {
	case *storepb.CreateCardRequest:
		if r.GetRetry() != nil {
			return "the card's retry policy"
		}
	case *storepb.FinishRequest:
		if r.GetRetryable() {
			return "a retryable verdict"
		}
	case *storepb.SetStateOwnedRequest:
		if r.GetRetry() {
			return "a retry's backoff"
		}
	case *storepb.SetBoardRequest:
		if r.GetNext().GetRetry() != nil {
			return "the board's retry policy"
		}
	}
	return ""
}
