// Package plugins is the agent's side of the process boundary between the
// leasekeeper agent and its storage backend. The agent loads its board.Store
// as a HashiCorp go-plugin plugin speaking gRPC: the built-in stores (bbolt,
// MongoDB) run in the agent's own binary re-executed with a hidden
// subcommand, and an external binary can serve any other backend.
//
// The boundary is three packages. This one, the agent's side, is Launch,
// which starts and supervises the plugin process and returns a *Proxy
// implementing board.Store. The plugin's side is package plugins/serve
// (serve.Serve), which a store plugin's main calls. What both speak — the
// handshake and protocol versions, the conversions between board values
// and messages, the identity of a store error on the wire, the limits of a
// message — is package plugins/internal/wire. Each side imports wire and
// neither imports the other, as in go-plugin's own examples.
//
// Every Store verb is one RPC (see proto/store.proto); the caller's context
// crosses the boundary (deadline and cancellation), and every board sentinel
// error crosses it too, so errors.Is and board.AsClaimConflict keep working
// on the agent's side.
//
// The RPCs do not cross one by one: the agent carries them on one
// long-lived Calls stream, and every call made while the previous message
// was being sent goes in the next one. The plugin runs the calls of a
// message at once, so the bbolt store commits their writes together, and
// answers each as it finishes, many replies to a message. A lone call is
// sent at once; one call's failure, cancellation or deadline is its own.
// Protocol 3, one RPC per call, and protocol 4, the stream before routing
// by labels, are still spoken both ways; a ClaimNext or Start that routes
// by labels is refused, unsent, to a plugin that negotiated either.
//
// A plugin call that was in flight when the plugin died fails with an error
// wrapping board.ErrOutcomeUnknown: the write may or may not have landed,
// and a heartbeat must not count it as a renewal. Calls made while the
// plugin is down fail at once with ErrUnavailable until the supervisor has
// restarted it.
//
// Only a failure of the transport (the connection or the plugin's end of
// the stream broke) gets the plugin replaced. A request that cannot be
// encoded — a string that is not UTF-8, which protobuf cannot carry — is
// refused before it is sent, as board.ErrInvalidArgument, exactly as the
// store refuses a malformed name; any other RPC error the plugin answers
// fails that call alone. Anything a caller can put in a request must never
// cost the store its process and every live claim its renewals.
package plugins
