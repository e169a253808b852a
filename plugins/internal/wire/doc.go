// Package wire is what the two ends of the store plugin boundary share: the
// agent's side (package plugins) and the plugin's (package plugins/serve)
// each import it, and neither imports the other. It holds the handshake and
// the protocol versions both speak, the conversions between board values and
// the messages of plugins/storepb (To<Message> builds a message from a Go
// value, From<Message> reads it back; the generated verbs and handlers of
// both sides call them by those names), the identity of a store error on the
// wire (ToStatus on the plugin's side, ErrorFromPB on the agent's), and the
// limits and flow-control window of the connection (DESIGN.md#plugin-boundary).
//
// It is internal: a store plugin's author imports plugins/serve, the agent
// imports plugins, and nothing outside the boundary reads its messages.
package wire
