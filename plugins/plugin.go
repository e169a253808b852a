package plugins

import (
	"context"
	"errors"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// VersionedPlugins is the plugin set of every protocol version this build
// speaks, for plugin.ClientConfig.VersionedPlugins and
// plugin.ServeConfig.VersionedPlugins. store is the backend a server serves;
// a client passes nil.
func VersionedPlugins(store board.Store) map[int]plugin.PluginSet {
	out := make(map[int]plugin.PluginSet, len(wire.Versions))
	for _, v := range wire.Versions {
		out[v] = plugin.PluginSet{wire.PluginName: &StorePlugin{Store: store, unary: wire.Unary(v), version: v}}
	}
	return out
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
		v = wire.ProtocolVersion
	}
	if p.unary {
		return newUnaryRemoteStore(c, v), nil
	}
	return newRemoteStore(c, v), nil
}
