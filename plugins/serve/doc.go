// Package serve is the plugin's side of the store plugin boundary: Serve,
// which a store plugin's main calls (the agent's own binary in its hidden
// store-plugin subcommand, or an external plugin's), opens the store and
// serves it to the agent that started the process over gRPC, until the
// agent stops it. The agent's side is package plugins (plugins.Launch);
// what both speak is package plugins/internal/wire, and this package does
// not import the agent's.
//
// Each RPC is one store verb, run under the caller's context (its deadline
// crosses the boundary); a store error goes back with its identity
// (wire.ToStatus), so errors.Is works on the agent's side. The calls the
// agent sends many to a message on the Calls stream run side by side, so
// the bbolt store commits their writes together, and each reply goes when
// its call returns (server.Calls, replyOutbox). The plugin dies with the
// agent that started it, and refuses to serve when run by hand or after
// that agent is gone (bindToParent).
package serve
