package serve

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
// serves (wire.Versions), for plugin.ServeConfig.VersionedPlugins: store
// is the backend served. Serve uses it. A plugin that calls plugin.Serve
// itself, as the module's test plugin does to play an older build, offers
// the versions it picks from it; it needs the handshake of package wire,
// which is internal, so outside this module a store plugin serves through
// Serve.
func VersionedPlugins(store board.Store) map[int]plugin.PluginSet {
	out := make(map[int]plugin.PluginSet, len(wire.Versions))
	for _, v := range wire.Versions {
		out[v] = plugin.PluginSet{wire.PluginName: &StorePlugin{Store: store}}
	}
	return out
}

// StorePlugin is the plugin's go-plugin definition of the store:
// GRPCServer serves Store. The same service serves every protocol version:
// the Calls stream and each call as its own RPC. Only gRPC is supported,
// and only the serving side: the agent's is plugins.Launch.
type StorePlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Store is the backend served.
	Store board.Store
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

// GRPCClient is not offered: the agent's side of the store is in package
// plugins, which this one does not import.
func (p *StorePlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("store plugin: the serving side dispenses no client; the agent's is plugins.Launch")
}
