package apitype

// FrameType names a watch-stream frame.
type FrameType string

const (
	// FrameHello is the first frame of every stream. Its Seq is the position
	// the stream starts after; Missed is true when the requested ?after=
	// position fell out of the agent's buffer (or is ahead of it, as after an
	// agent restart), so frames may have been lost and the client must
	// re-check what it holds.
	FrameHello FrameType = "hello"
	// FrameClaimLost: the agent stopped holding a claim (card, epoch,
	// marker, reason). The holder must stop working on the card.
	FrameClaimLost FrameType = "claim_lost"
	// FrameLaunch: a card entered a launch state (card, state), or a
	// one-shot label fired on it (reason = the label, state = where the
	// card is); a hint for workers waiting for work. Machine-reason events
	// never produce one (DESIGN.md#machine-reasons).
	FrameLaunch FrameType = "launch"
	// FramePing is sent every lease/3 and carries, for each claim the agent
	// holds for the watching process, how long the agent still trusts it,
	// and when it measured that (Frame.StreamMS).
	FramePing FrameType = "ping"
)

// Frame is one NDJSON line of the watch stream. Every frame has a Seq:
// claim_lost and launch frames are numbered in the agent's buffer; hello and
// ping frames carry the position the stream has reached, so resuming with
// ?after= that Seq loses nothing.
type Frame struct {
	Seq    int64     `json:"seq"`
	Type   FrameType `json:"type"`
	Card   string    `json:"card,omitempty"`
	Epoch  int64     `json:"epoch,omitempty"`
	Marker string    `json:"marker,omitempty"`
	Reason string    `json:"reason,omitempty"`
	State  string    `json:"state,omitempty"`
	// Claims (ping): the watcher's claims and their trusted time.
	Claims []TrustedClaim `json:"claims,omitempty"`
	// StreamMS (ping): when the agent measured the Claims' trusted times,
	// in whole milliseconds (rounded down) since it received this watch
	// request. Added to the moment the watcher SENT that request, on its own
	// monotonic clock, it gives an instant no later than the measurement, to
	// count each trusted time from: a frame read late (a stopped or starved
	// reader) then moves no deadline past the agent's. Worker and agent share
	// one host and so one monotonic clock; only durations cross the wire.
	// Absent from agents that predate it: count from the frame's receipt.
	StreamMS *int64 `json:"stream_ms,omitempty"`
	// Hello fields.
	Missed   bool   `json:"missed,omitempty"`
	Oldest   int64  `json:"oldest,omitempty"`
	Liveness string `json:"liveness,omitempty"`
	LeaseMS  int64  `json:"lease_ms,omitempty"`
	PingMS   int64  `json:"ping_ms,omitempty"`
}

// Claim-lost reasons the agent uses.
const (
	LostForceReleased = "force_released"
	LostLeaseExpired  = "lease_expired"
	LostConflict      = "claim_conflict"
	LostOwnerGone     = "owner_gone"
	LostNoKeepalive   = "keepalive_missed"
)
