package plugins

import (
	"context"
	"errors"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// ProtocolVersion is the version of the store plugin protocol this build
// speaks. Bump it (and keep serving the old version in VersionedPlugins for
// as long as it is supported) whenever proto/store.proto changes in a way an
// older peer cannot read.
const ProtocolVersion = 7

// Version 7 added the retry policy (DESIGN.md#retries): a board's and a
// card's policy, a retryable verdict, a retry's backoff. A plugin built
// before it would drop them silently, so the agent refuses to send any of
// them to a plugin that negotiated an older version (versionGuard).
const retryProtocolVersion = 7

// Version 6 added the retention verbs, Prune and DeleteCard
// (DESIGN.md#retention). A plugin built before them answers them
// Unimplemented; the agent refuses to send them to a plugin that negotiated
// an older version (versionGuard), so the operator reads which plugin to
// rebuild rather than a bare "not implemented".
const retentionProtocolVersion = 6

// Version 5 added the labels a ClaimNext or a Start next routes by
// (DESIGN.md#label-routing). A plugin built before it reads such a request
// without them and would take any card, so the agent refuses to send one
// to a plugin that negotiated an older version (versionGuard).
const labelsProtocolVersion = 5

// callsProtocolVersion is the protocol before labels, still spoken: version
// 4 added the Calls stream, on which the agent sends the same calls many to
// a message.
const callsProtocolVersion = 4

// unaryProtocolVersion is the protocol before that, still spoken: the same
// service, each call its own RPC.
const unaryProtocolVersion = 3

// PluginName is the name the store is dispensed under.
const PluginName = "store"

// Handshake is shared by the agent and every store plugin. The magic cookie
// only tells a plugin binary it was started by a leasekeeper agent (and a
// person who runs it by hand gets a clear message); it is not a security
// measure.
var Handshake = plugin.HandshakeConfig{
	// ProtocolVersion is left zero on purpose: the versions are negotiated
	// through VersionedPlugins.
	MagicCookieKey:   "LEASEKEEPER_STORE_PLUGIN",
	MagicCookieValue: "8b1c3f0e-claim-lease-store",
}

// VersionedPlugins is the plugin set of every protocol version this build
// speaks, for plugin.ClientConfig.VersionedPlugins and
// plugin.ServeConfig.VersionedPlugins. store is the backend a server serves;
// a client passes nil.
func VersionedPlugins(store board.Store) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		ProtocolVersion:          {PluginName: &StorePlugin{Store: store, version: ProtocolVersion}},
		retentionProtocolVersion: {PluginName: &StorePlugin{Store: store, version: retentionProtocolVersion}},
		labelsProtocolVersion:    {PluginName: &StorePlugin{Store: store, version: labelsProtocolVersion}},
		callsProtocolVersion:     {PluginName: &StorePlugin{Store: store, version: callsProtocolVersion}},
		unaryProtocolVersion:     {PluginName: &StorePlugin{Store: store, unary: true, version: unaryProtocolVersion}},
	}
}

// StorePlugin is the go-plugin definition of the store: GRPCServer serves
// Store, GRPCClient returns a board.Store talking to it. Only gRPC is
// supported.
type StorePlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Store is the backend served by the plugin side; nil on the agent side.
	Store board.Store
	// unary: the agent side sends each call as its own RPC (protocol 3)
	// rather than on the Calls stream.
	unary bool
	// version is the protocol version the set is offered under; zero is
	// ProtocolVersion (a set built by hand, as in tests).
	version int
}

var _ plugin.GRPCPlugin = (*StorePlugin)(nil)

// GRPCServer registers the store service.
func (p *StorePlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Store == nil {
		return errors.New("store plugin: no store to serve")
	}
	storepb.RegisterStoreServer(s, &server{store: p.Store})
	return nil
}

// GRPCClient returns a board.Store over the connection: its calls ride on
// the Calls stream, or are one RPC each when the plugin speaks only the
// previous protocol. Its Traits are empty until the first round trip: use Launch, which does it, rather than
// dispensing by hand.
func (p *StorePlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	v := p.version
	if v == 0 {
		v = ProtocolVersion
	}
	if p.unary {
		return newUnaryRemoteStore(c, v), nil
	}
	return newRemoteStore(c, v), nil
}
