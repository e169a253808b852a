package wire

import "github.com/hashicorp/go-plugin"

// ProtocolVersion is the version of the store plugin protocol this build
// speaks. Bump it (and keep speaking the old version in Versions for as long
// as it is supported) whenever proto/store.proto changes in a way an
// older peer cannot read.
const ProtocolVersion = 7

// Version 7 added the retry policy (DESIGN.md#retries): a board's and a
// card's policy, a retryable verdict, a retry's backoff. A plugin built
// before it would drop them silently, so the agent refuses to send any of
// them to a plugin that negotiated an older version (plugins.versionGuard).
const RetryProtocolVersion = 7

// Version 6 added the retention verbs, Prune and DeleteCard
// (DESIGN.md#retention). A plugin built before them answers them
// Unimplemented; the agent refuses to send them to a plugin that negotiated
// an older version (plugins.versionGuard), so the operator reads which plugin to
// rebuild rather than a bare "not implemented".
const RetentionProtocolVersion = 6

// Version 5 added the labels a ClaimNext or a Start next routes by
// (DESIGN.md#label-routing). A plugin built before it reads such a request
// without them and would take any card, so the agent refuses to send one
// to a plugin that negotiated an older version (plugins.versionGuard).
const LabelsProtocolVersion = 5

// CallsProtocolVersion is the protocol before labels, still spoken: version
// 4 added the Calls stream, on which the agent sends the same calls many to
// a message.
const CallsProtocolVersion = 4

// UnaryProtocolVersion is the protocol before that, still spoken: the same
// service, each call its own RPC.
const UnaryProtocolVersion = 3

// PluginName is the name the store is dispensed under.
const PluginName = "store"

// Handshake is shared by the agent and every store plugin. The magic cookie
// only tells a plugin binary it was started by a leasekeeper agent (and a
// person who runs it by hand gets a clear message); it is not a security
// measure.
var Handshake = plugin.HandshakeConfig{
	// ProtocolVersion is left zero on purpose: the versions are negotiated
	// through the plugin sets of Versions.
	MagicCookieKey:   "LEASEKEEPER_STORE_PLUGIN",
	MagicCookieValue: "8b1c3f0e-claim-lease-store",
}

// Versions are the protocol versions this build speaks, both ways: the
// agent offers them (plugins.LaunchConfig.Protocols picks among them) and a
// plugin serves them (serve.VersionedPlugins), each side building its own
// plugin set of each.
var Versions = []int{ProtocolVersion, RetentionProtocolVersion, LabelsProtocolVersion, CallsProtocolVersion, UnaryProtocolVersion}

// Unary reports whether protocol version v sends each call as its own RPC
// rather than on the Calls stream.
func Unary(v int) bool { return v == UnaryProtocolVersion }

// ParentPIDEnv carries the agent's pid to the plugin, so the plugin can
// tell whether the agent died before the plugin armed its parent-death
// signal (DESIGN.md#parent-death).
const ParentPIDEnv = "LEASEKEEPER_STORE_PLUGIN_PARENT"

// ServeErrPrefix starts the line a plugin serving through serve.Serve
// writes to stderr when it fails: the agent finds the plugin's own account
// of the failure by it.
const ServeErrPrefix = "store plugin: "
