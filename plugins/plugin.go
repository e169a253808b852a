package plugins

import (
	"context"
	"errors"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
)

// clientPlugins is the plugin set of every protocol version this build
// speaks (wire.Versions), for plugin.ClientConfig.VersionedPlugins.
func clientPlugins() map[int]plugin.PluginSet {
	out := make(map[int]plugin.PluginSet, len(wire.Versions))
	for _, v := range wire.Versions {
		out[v] = plugin.PluginSet{wire.PluginName: &storePlugin{unary: wire.Unary(v), version: v}}
	}
	return out
}

// storePlugin is the agent's go-plugin definition of the store:
// GRPCClient returns a board.Store talking to the plugin. Only gRPC is
// supported, and only the agent's side: the plugin's is serve.StorePlugin.
type storePlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// unary: the agent side sends each call as its own RPC (protocol 3)
	// rather than on the Calls stream.
	unary bool
	// version is the protocol version the set is offered under; zero is
	// wire.ProtocolVersion (a set built by hand, as in tests).
	version int
}

var _ plugin.GRPCPlugin = (*storePlugin)(nil)

// GRPCServer is not offered: the agent serves no store.
func (p *storePlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("store plugin: the agent's side serves no store")
}

// GRPCClient returns a board.Store over the connection: its calls ride on
// the Calls stream, or are one RPC each when the plugin speaks only the
// previous protocol. Its Traits are empty until the first round trip: use
// Launch, which does it, rather than dispensing by hand.
func (p *storePlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	v := p.version
	if v == 0 {
		v = wire.ProtocolVersion
	}
	if p.unary {
		return newUnaryRemoteStore(c, v), nil
	}
	return newRemoteStore(c, v), nil
}
