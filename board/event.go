package board

import "time"

// EventType names what an event records. The watchdog reuses this
// vocabulary (a reclaim is a claimed event, a filing is a state event)
// rather than minting audit types (DESIGN.md#provenance).
type EventType string

const (
	EventCardCreated   EventType = "card_created"
	EventClaimed       EventType = "claimed"
	EventReleased      EventType = "released"
	EventState         EventType = "state"
	EventLabels        EventType = "labels"
	EventLastRun       EventType = "last_run"
	EventAwaitingInput EventType = "awaiting_input"
	EventGaveUp        EventType = "gave_up"
	EventRunCreated    EventType = "run_created"
	EventRunUpdated    EventType = "run_updated"
	// EventCardDeleted records an operator's Store.DeleteCard
	// (DESIGN.md#retention); the card is gone when it is read.
	EventCardDeleted EventType = "card_deleted"
)

// Reason is the provenance of a state event.
type Reason string

const (
	// Machine reasons: a write the machine decided on its own. They fire no
	// effect at all (no launch, no promotion, no one-shot consumption).
	ReasonWatchdog     Reason = "watchdog"
	ReasonStateRename  Reason = "state_rename"
	ReasonStateDelete  Reason = "state_delete"
	ReasonFieldRename  Reason = "field_rename"
	ReasonFieldDelete  Reason = "field_delete"
	ReasonUnlaunchable Reason = "unlaunchable"
	// ReasonRetry returns a card to the pool for another attempt under its
	// retry policy (DESIGN.md#retries).
	ReasonRetry Reason = "retry"

	// Descriptive reasons: not machine. unblocked is the cascade of a closed
	// blocker; run_finished / run_failed are a run's own verdict, which the
	// watchdog merely writes down, so the downstream chain fires as for a
	// living owner.
	ReasonUnblocked   Reason = "unblocked"
	ReasonRunFinished Reason = "run_finished"
	ReasonRunFailed   Reason = "run_failed"
	ReasonNone        Reason = ""
)

// machineReasons is the enumerated machine provenance
// (DESIGN.md#machine-reasons). Keep it a closed list: a reason is machine
// only by name.
var machineReasons = map[Reason]bool{
	ReasonWatchdog:     true,
	ReasonStateRename:  true,
	ReasonStateDelete:  true,
	ReasonFieldRename:  true,
	ReasonFieldDelete:  true,
	ReasonUnlaunchable: true,
	ReasonRetry:        true,
}

// IsMachineReason reports whether r is machine provenance.
func IsMachineReason(r Reason) bool { return machineReasons[r] }

// MachineReasons lists the machine reasons.
func MachineReasons() []Reason {
	return []Reason{ReasonWatchdog, ReasonStateRename, ReasonStateDelete, ReasonFieldRename, ReasonFieldDelete, ReasonUnlaunchable, ReasonRetry}
}

// Event is one entry of the audit log, appended in the same atomic step as
// the write it records. Seq is strictly increasing per store.
type Event struct {
	Seq    int64     `json:"seq"`
	Type   EventType `json:"type"`
	Card   string    `json:"card"`
	Reason Reason    `json:"reason,omitempty"`
	// Actor is who asked (a marker, "uid:N", "cli"); blanked for machine
	// reasons so effect layers never attribute a machine write to a person.
	Actor string    `json:"actor,omitempty"`
	At    time.Time `json:"at"`
	Data  EventData `json:"data"`
}

// EventData carries the details of an event; only the fields that matter to
// its type are set.
type EventData struct {
	From   string   `json:"from,omitempty"`
	To     string   `json:"to,omitempty"`
	Marker string   `json:"marker,omitempty"`
	Epoch  int64    `json:"epoch,omitempty"`
	Labels []string `json:"labels,omitempty"`
	// Added / Removed are the net label change of a labels event, so an
	// effect layer can tell an add (which may arm a one-shot) from a remove.
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
	RunID   string   `json:"run_id,omitempty"`
	Status  string   `json:"status,omitempty"`
	Value   bool     `json:"value,omitempty"`
}

// FiresEffects reports whether an event may trigger effects (launch hints,
// one-shot label consumption). Machine-reason events never do.
func (e Event) FiresEffects() bool { return !IsMachineReason(e.Reason) }
