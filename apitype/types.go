package apitype

import (
	"fmt"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// Liveness modes of the agent.
const (
	// LivenessPID renews a claim while the worker pid, matched with its
	// start time, is alive.
	LivenessPID = "pid"
	// LivenessKeepalive renews a claim only while the worker's client pings.
	LivenessKeepalive = "keepalive"
)

// ClaimRequest asks for a claim: exactly one of Card (that card) or Next
// (the oldest unclaimed card in a pool state). The marker is never in the
// body: the agent derives it from the caller's kernel credentials.
type ClaimRequest struct {
	Card string `json:"card,omitempty"`
	Next bool   `json:"next,omitempty"`
	// Labels, with Next: take only a card carrying every one of them
	// (DESIGN.md#label-routing).
	Labels []string `json:"labels,omitempty"`
}

// ClaimResponse is a granted claim.
type ClaimResponse struct {
	Card  board.Card       `json:"card"`
	Token board.ClaimToken `json:"token"`
	// LeaseMS is the lease the agent stamps and renews, in milliseconds.
	LeaseMS int64 `json:"lease_ms"`
	// TrustedMS is how long, from the moment the agent answered, the agent
	// still trusts this lease. It is relative on purpose: the client adds it
	// to its own monotonic clock, so the two processes' wall clocks never
	// have to agree.
	TrustedMS int64 `json:"trusted_ms"`
	// Liveness is the agent's mode; in keepalive the client must ping every
	// PingMS or the agent stops renewing.
	Liveness string `json:"liveness"`
	PingMS   int64  `json:"ping_ms"`
}

// Fenced is embedded in every owner write: the epoch of the caller's token.
// The marker half of the token is the caller's own, from the kernel.
type Fenced struct {
	Epoch int64 `json:"epoch"`
}

// FenceEpoch is the epoch the caller believes it holds.
func (f Fenced) FenceEpoch() int64 { return f.Epoch }

// SetStateRequest is an owner's fenced state move.
type SetStateRequest struct {
	Fenced
	To string `json:"to"`
	// From, when set, makes the move a compare-and-set on the source state.
	From string `json:"from,omitempty"`
	// Reason may be empty, run_finished or run_failed; machine reasons are
	// refused from workers (they would silence effects).
	Reason board.Reason `json:"reason,omitempty"`
}

// ChangedResponse answers a write that may be a no-op.
type ChangedResponse struct {
	Changed bool `json:"changed"`
}

// SetLastRunRequest stamps the card's last_run_id.
type SetLastRunRequest struct {
	Fenced
	RunID string `json:"run_id"`
}

// SetAwaitingInputRequest sets the awaiting_input flag.
type SetAwaitingInputRequest struct {
	Fenced
	AwaitingInput bool `json:"awaiting_input"`
}

// SetGaveUpRequest sets (or, with null, clears) the gave_up stamp.
type SetGaveUpRequest struct {
	Fenced
	GaveUp *board.GaveUp `json:"gave_up"`
}

// StartRunRequest creates a run owned by the caller's token and stamps the
// card's last_run_id with it.
type StartRunRequest struct {
	Fenced
	// ID is optional; the agent mints one when empty.
	ID string `json:"id,omitempty"`
	// Status defaults to running.
	Status     board.RunStatus `json:"status,omitempty"`
	Checkpoint string          `json:"checkpoint,omitempty"`
}

// StartRequest asks the agent to claim a card and start its run in one
// write: exactly one of Card (that card) or Next (the oldest unclaimed card
// in a pool state). A card that records a run without a final verdict
// resumes it unless Fresh is set.
type StartRequest struct {
	Card string `json:"card,omitempty"`
	Next bool   `json:"next,omitempty"`
	// Labels, with Next: as ClaimRequest.Labels.
	Labels []string `json:"labels,omitempty"`
	// RunID is optional; the agent mints one when empty. A client that
	// retries a Start whose answer it never saw sends the same id.
	RunID string `json:"run_id,omitempty"`
	// Status defaults to running.
	Status     board.RunStatus `json:"status,omitempty"`
	Checkpoint string          `json:"checkpoint,omitempty"`
	Fresh      bool            `json:"fresh,omitempty"`
}

// StartResponse is a granted claim with its run.
type StartResponse struct {
	ClaimResponse
	Run board.Run `json:"run"`
	// Resumed is true when Run is the card's recorded run, taken over.
	Resumed bool `json:"resumed,omitempty"`
}

// FinishRequest is the verdict on the claim's run: the agent records it,
// files the card and releases the claim in one fenced write.
type FinishRequest struct {
	Fenced
	RunID string `json:"run_id"`
	// Status is finished, failed or failed_resumable.
	Status      board.RunStatus `json:"status"`
	FailureCode string          `json:"failure_code,omitempty"`
	Checkpoint  *string         `json:"checkpoint,omitempty"`
	// Retryable marks a failed verdict worth another attempt under the
	// card's retry policy (DESIGN.md#retries); only with status failed.
	Retryable bool `json:"retryable,omitempty"`
}

// FinishResponse is the card and the run as Finish left them.
type FinishResponse struct {
	Card board.Card `json:"card"`
	Run  board.Run  `json:"run"`
}

// UpdateRunRequest changes a run the caller owns. Nil fields are left alone.
// IfStatus makes the update a compare-and-set on the current status.
type UpdateRunRequest struct {
	IfStatus     *board.RunStatus    `json:"if_status,omitempty"`
	Status       *board.RunStatus    `json:"status,omitempty"`
	Continuation *board.Continuation `json:"continuation,omitempty"`
	FailureCode  *string             `json:"failure_code,omitempty"`
	Checkpoint   *string             `json:"checkpoint,omitempty"`
}

// TrustedClaim is one claim the agent holds for the caller and how long it
// still trusts its lease, relative to the moment the agent answered.
type TrustedClaim struct {
	Card      string `json:"card"`
	Epoch     int64  `json:"epoch"`
	TrustedMS int64  `json:"trusted_ms"`
}

// KeepaliveResponse answers a keepalive ping with the caller's claims.
type KeepaliveResponse struct {
	Claims []TrustedClaim `json:"claims"`
}

// CreateCardRequest creates a card (operator).
type CreateCardRequest = board.CreateCardParams

// ListCardsResponse lists cards.
type ListCardsResponse struct {
	Cards []board.Card `json:"cards"`
}

// MoveRequest is an operator state move (SetState) or reopen.
type MoveRequest struct {
	To     string       `json:"to"`
	Reason board.Reason `json:"reason,omitempty"`
}

// AdjustLabelsRequest is a relative label edit: add, then remove (removes win).
type AdjustLabelsRequest struct {
	Add    []string `json:"add,omitempty"`
	Remove []string `json:"remove,omitempty"`
}

// SetLabelsRequest replaces the label set (absolute by contract).
type SetLabelsRequest struct {
	Labels []string `json:"labels"`
}

// ForceReleaseResponse names the claim an operator broke.
type ForceReleaseResponse struct {
	Card string `json:"card"`
	// Holder and Epoch are the claim that was released; Holder is empty
	// when the card was already free.
	Holder string `json:"holder,omitempty"`
	Epoch  int64  `json:"epoch,omitempty"`
}

// DeleteCardResponse is what an operator's card delete removed
// (DESIGN.md#retention).
type DeleteCardResponse struct {
	// Card is the card as it was deleted.
	Card board.Card `json:"card"`
	// Runs is how many of its runs went with it.
	Runs int `json:"runs"`
	// Holder and Epoch are the claim a forced delete released first;
	// empty when the card was free.
	Holder string `json:"holder,omitempty"`
	Epoch  int64  `json:"epoch,omitempty"`
}

// PruneRequest asks for one bounded prune now (DESIGN.md#retention).
type PruneRequest struct {
	// OlderThanMS is the age of what goes, in milliseconds; 0 is the
	// agent's retention.age.
	OlderThanMS int64 `json:"older_than_ms,omitempty"`
	// Limit bounds the runs and, separately, the events; 0 is 500.
	Limit int `json:"limit,omitempty"`
	// DryRun reports what would go and deletes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// PruneResponse is what a prune deleted, or would delete.
type PruneResponse struct {
	// Before is the cutoff, by the store's clock.
	Before time.Time `json:"before"`
	Runs   int       `json:"runs"`
	Events int       `json:"events"`
	// Cards are the cards whose runs went.
	Cards []string `json:"cards"`
	// EventsThrough is the highest event seq that went; 0 when none.
	EventsThrough int64 `json:"events_through,omitempty"`
	// More is true when the limit stopped the prune with more to go.
	More   bool `json:"more,omitempty"`
	DryRun bool `json:"dry_run,omitempty"`
}

// EventsResponse is a page of the audit log.
type EventsResponse struct {
	Events []board.Event `json:"events"`
}

// EventsHeadResponse is the head of the audit log: the sequence number of
// its last event (0 while it has none). Following the log with after= it
// delivers every event written after the read, none from before; a waiter
// reads it before it tries, so a change between its try and its follow is
// never missed (DESIGN.md#waiting).
type EventsHeadResponse struct {
	Seq int64 `json:"seq"`
}

// HeldClaim is one claim the agent renews, as shown by status.
type HeldClaim struct {
	Card      string `json:"card"`
	Marker    string `json:"marker"`
	Epoch     int64  `json:"epoch"`
	PID       int    `json:"pid,omitempty"`
	TrustedMS int64  `json:"trusted_ms"`
}

// Status describes the agent. The agent fills it; the socket only carries it.
type Status struct {
	Host      string      `json:"host"`
	PID       int         `json:"pid"`
	Marker    string      `json:"marker,omitempty"`
	Version   string      `json:"version,omitempty"`
	StartedAt time.Time   `json:"started_at"`
	Socket    string      `json:"socket,omitempty"`
	Backend   Backend     `json:"backend"`
	Liveness  string      `json:"liveness"`
	LeaseMS   int64       `json:"lease_ms"`
	Reaper    ReaperInfo  `json:"reaper"`
	Claims    []HeldClaim `json:"claims"`
	// ClaimsHeld is len(Claims), for scripts that only need the count.
	ClaimsHeld int `json:"claims_held"`
	// Draining is true once the agent stopped granting new claims.
	Draining bool `json:"draining"`
	// Store is the result of a store round trip made while answering.
	Store StoreHealth `json:"store"`
	// Heartbeat is the renewal loop's schedule and its last tick.
	Heartbeat HeartbeatInfo `json:"heartbeat"`
}

// Backend names the agent's store and the process it runs in.
type Backend struct {
	// Name is store.backend as configured: "bolt", "mongo", or the path
	// of a store plugin binary.
	Name string `json:"name"`
	// Plugin is the executable the store's plugin process runs: the
	// agent's own binary for a built-in store it re-executes, the plugin
	// binary otherwise. Absent when the store runs in the agent's process.
	// The process itself is StoreHealth.Plugin.
	Plugin string `json:"plugin,omitempty"`
	// Path is the bbolt file the board lives in (store.path), absolute.
	// Absent when the store is not a bbolt file (MongoDB, a plugin binary).
	Path string `json:"path,omitempty"`
}

// String is the backend for people: "bolt (in-process)",
// "bolt (plugin /usr/bin/leasekeeper)", "/opt/store (plugin)".
func (b Backend) String() string {
	switch b.Plugin {
	case "":
		return b.Name + " (in-process)"
	case b.Name:
		return b.Name + " (plugin)"
	}
	return b.Name + " (plugin " + b.Plugin + ")"
}

// StoreHealth is what the agent learned by asking its store a question
// while it answered the status request.
type StoreHealth struct {
	// Reachable is true when the store answered (a domain answer such as
	// "not found" counts: the store is there).
	Reachable bool `json:"reachable"`
	// Error says why the store is not reachable.
	Error string `json:"error,omitempty"`
	// CheckMS is how long the round trip took.
	CheckMS float64 `json:"check_ms"`
	// Plugin describes the store plugin process; nil when the store runs
	// inside the agent.
	Plugin *PluginInfo `json:"plugin,omitempty"`
	// LastWrite is how the store answered the last write the agent made
	// through it (renewals aside); absent before the first one. A failed
	// one makes the agent unhealthy until a write succeeds again: a store
	// that answers reads but refuses writes (a full disk) cannot record a
	// claim, a run or a filing.
	LastWrite *WriteInfo `json:"last_write,omitempty"`
}

// WriteInfo is the outcome of one store write.
type WriteInfo struct {
	At    time.Time `json:"at"`
	Op    string    `json:"op"`
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
}

// PluginInfo describes the store plugin process.
type PluginInfo struct {
	// State is "up", "down" (crashed, restart pending) or "closed".
	State    string `json:"state"`
	PID      int    `json:"pid,omitempty"`
	Restarts int    `json:"restarts"`
	// LastError is the last crash or failed restart, kept after recovery.
	LastError string `json:"last_error,omitempty"`
	// Since is when State last changed.
	Since time.Time `json:"since"`
}

// HeartbeatInfo is the renewal loop as status shows it.
type HeartbeatInfo struct {
	// IntervalMS is the tick interval (lease/3) in force.
	IntervalMS int64 `json:"interval_ms"`
	// LastTick is nil until the first tick ended.
	LastTick *HeartbeatTick `json:"last_tick,omitempty"`
}

// HeartbeatTick reports one heartbeat tick.
type HeartbeatTick struct {
	StartedAt time.Time `json:"started_at"`
	// AgoMS is how long before the answer the tick ended, by the agent's
	// clock: a value far above IntervalMS means the loop is stuck.
	AgoMS      int64   `json:"ago_ms"`
	DurationMS float64 `json:"duration_ms"`
	// Result is "ok" (the store answered the renewal batch), "idle"
	// (nothing held, no store call) or "error" (the batch failed).
	Result  string `json:"result"`
	Held    int    `json:"held"`
	Renewed int    `json:"renewed"`
	Lost    int    `json:"lost"`
	Error   string `json:"error,omitempty"`
}

// ReaperInfo is the watchdog's configuration and last pass.
type ReaperInfo struct {
	Enabled    bool        `json:"enabled"`
	IntervalMS int64       `json:"interval_ms"`
	Batch      int         `json:"batch"`
	LastPass   *ReaperPass `json:"last_pass,omitempty"`
}

// ReaperPass reports one watchdog pass.
type ReaperPass struct {
	DryRun bool `json:"dry_run"`
	// Gated is true when decisions were off (the gate stops decisions, not
	// repair: DESIGN.md#gate).
	Gated     bool             `json:"gated"`
	StartedAt time.Time        `json:"started_at"`
	Examined  int              `json:"examined"`
	Decisions []ReaperDecision `json:"decisions"`
	// DurationMS is how long the pass took.
	DurationMS float64 `json:"duration_ms"`
	// Actions counts the expired claims decided, by the decision table's
	// action (keep, release, give_up, complete, fail, repark).
	Actions map[string]int `json:"actions"`
	// Sweeps counts the claims the repair sweeps handled, keyed
	// "<sweep>: <outcome>" (e.g. "recovery: released").
	Sweeps map[string]int `json:"sweeps"`
	// ClockWaitMS, when present, is how much longer the reaper watches the
	// store's clock before it decides by it (it has just started, or the
	// clock stepped): this pass decided nothing (DESIGN.md#clock-steps).
	ClockWaitMS float64 `json:"clock_wait_ms,omitempty"`
	// Reapers, when present, is how many agents' reapers shared the
	// fleet's expired claims: this pass examined its share
	// (DESIGN.md#reaper-shares).
	Reapers int `json:"reapers,omitempty"`
}

// ReaperDecision is what the watchdog decided (or would decide, dry run)
// about one card.
type ReaperDecision struct {
	Card       string `json:"card"`
	PrevHolder string `json:"prev_holder,omitempty"`
	PrevEpoch  int64  `json:"prev_epoch,omitempty"`
	Action     string `json:"action"`
	Reason     string `json:"reason,omitempty"`
	Applied    bool   `json:"applied"`
	Error      string `json:"error,omitempty"`
}

// BoardResponse is the board the agent serves: its states in order with
// their flags, and the columns callers route cards by, named so a client
// never assumes the default board's names.
type BoardResponse struct {
	States []board.State `json:"states"`
	// Running is the running column.
	Running string `json:"running"`
	// FirstPool is the first pool state outside the running column: where an
	// unblocked dependent or a fleet repark goes.
	FirstPool string `json:"first_pool"`
	// Completion is the first completion state (a finished run's column).
	Completion string `json:"completion"`
	// Failed is the column a failed run is filed to: the state named
	// "failed", which the watchdog requires as well; empty when the board
	// has none.
	Failed string `json:"failed,omitempty"`
	// Retry is the board's default retry policy as stored; absent when it
	// sets none (the defaults apply: DESIGN.md#retries).
	Retry board.RetryPolicy `json:"retry,omitzero"`
}

// BoardOf describes b for the socket.
func BoardOf(b board.Board) BoardResponse {
	r := BoardResponse{
		Retry:      b.Retry,
		States:     b.States,
		Running:    b.Running(),
		FirstPool:  b.FirstPool(),
		Completion: b.Completion(),
	}
	if r.States == nil {
		r.States = []board.State{}
	}
	if b.Has(board.StateFailed) {
		r.Failed = board.StateFailed
	}
	return r
}

// Unhealthy says why the agent that answered with this status is not
// healthy, or "" when it is (`leasekeeper health`): it is shutting down,
// its store does not answer or refuses writes, or its heartbeat loop
// stopped ticking. The last check matters most where no systemd
// watchdog runs (a container): a tick waits on the store for at most about
// one lease and the next comes an interval later, so a tick that ended
// longer ago than both means the loop is stuck.
func (st Status) Unhealthy() string {
	switch {
	case st.Draining:
		return "agent is shutting down"
	case !st.Store.Reachable:
		return "store unreachable: " + st.Store.Error
	case st.Store.LastWrite != nil && !st.Store.LastWrite.OK:
		return fmt.Sprintf("store refuses writes: its last one (%s) failed: %s", st.Store.LastWrite.Op, st.Store.LastWrite.Error)
	}
	if t := st.Heartbeat.LastTick; t != nil && st.LeaseMS > 0 {
		if stall := st.LeaseMS + st.Heartbeat.IntervalMS; t.AgoMS > stall {
			return fmt.Sprintf("heartbeat loop stalled: its last tick ended %s ago (lease %s)",
				time.Duration(t.AgoMS)*time.Millisecond, time.Duration(st.LeaseMS)*time.Millisecond)
		}
	}
	return ""
}
