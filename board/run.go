package board

import "time"

// RunStatus is where a run is in its life.
type RunStatus string

const (
	RunRunning            RunStatus = "running"
	RunQueued             RunStatus = "queued"
	RunPausedWaitingHuman RunStatus = "paused_waiting_human"
	RunPausedOperator     RunStatus = "paused_operator"
	RunFinished           RunStatus = "finished"
	RunFailed             RunStatus = "failed"
	RunFailedResumable    RunStatus = "failed_resumable"
	RunCancelled          RunStatus = "cancelled"
)

// Known reports whether s is one of the statuses above.
func (s RunStatus) Known() bool {
	switch s {
	case RunRunning, RunQueued, RunPausedWaitingHuman, RunPausedOperator,
		RunFinished, RunFailed, RunFailedResumable, RunCancelled:
		return true
	}
	return false
}

// Continuation is a platform continuation armed on a run; an armed one owns
// the run's future (DESIGN.md#row-8), so the watchdog keeps the card.
type Continuation string

const (
	ContinuationNone              Continuation = "none"
	ContinuationRedeliveryPending Continuation = "redelivery_pending"
	ContinuationRetryArmed        Continuation = "retry_armed"
)

// Armed reports whether a continuation owns the run's future.
func (c Continuation) Armed() bool {
	return c == ContinuationRedeliveryPending || c == ContinuationRetryArmed
}

// FailureClaimReleased is the failure code of a run whose claim was
// released by an operator (Store.Release) while it was open: the run is
// left resumable, and the next Start resumes it.
const FailureClaimReleased = "CLAIM_RELEASED"

// FailureRunSuperseded is the failure code of a recorded run without a
// verdict that a fresh Start replaced (StartParams.Fresh).
const FailureRunSuperseded = "RUN_SUPERSEDED"

// FailureProcessOrphaned is reserved for the watchdog's liveness oracle.
const FailureProcessOrphaned = "PROCESS_ORPHANED"

// Run is one execution of a card's work.
type Run struct {
	ID           string       `json:"id"`
	Card         string       `json:"card"`
	Status       RunStatus    `json:"status"`
	Continuation Continuation `json:"continuation,omitempty"`
	FailureCode  string       `json:"failure_code,omitempty"`
	Checkpoint   string       `json:"checkpoint,omitempty"`
	Owner        string       `json:"owner"` // the claim marker that started it
	Epoch        int64        `json:"epoch"` // the claim epoch that started it
	Host         string       `json:"host,omitempty"`
	PID          int          `json:"pid,omitempty"`
	// PIDStart is the owner's start in milliseconds since the Unix epoch,
	// as read from a boot time truncated to seconds: two reads of one
	// process may differ by a second, so it identifies the process only
	// approximately. It is what runs recorded before PIDStartTicks carry,
	// and it stays for people and older agents to read.
	PIDStart int64 `json:"pid_start,omitempty"`
	// PIDStartTicks and BootID identify the owner exactly: the kernel's
	// start of the process in clock ticks after boot (/proc/PID/stat field
	// 22), and the boot those ticks count from. The agent compares these
	// whenever a run carries them (pidprobe.Identity).
	PIDStartTicks int64  `json:"pid_start_ticks,omitempty"`
	BootID        string `json:"boot_id,omitempty"`
	// StartedFrom is the column the card was in when Start started (or
	// resumed) this run: the one it moved the card out of into the running
	// column, or the running column itself. The store sets it. A resumable
	// Finish files the card back there when it lies outside the pool
	// (Board.FinishFiling). Empty for a run made by CreateRun or recorded
	// before the field existed.
	StartedFrom string `json:"started_from,omitempty"`
	// RetryableFailure is set by a failed Finish its worker marked
	// retryable (FinishParams.Retryable; Run.Retryable).
	RetryableFailure bool      `json:"retryable,omitempty"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
}

// UpdateRunParams changes a run. Nil fields are left alone. IfStatus, when set,
// makes the update a compare-and-set on the current status (the liveness
// oracle uses it so a late "finished" from a living owner is never
// overwritten by PROCESS_ORPHANED, and vice versa).
type UpdateRunParams struct {
	ID string `json:"id"`
	// Token is the claim the write is made under (the fence; see
	// Store.UpdateRun). Required.
	Token        ClaimToken    `json:"token"`
	IfStatus     *RunStatus    `json:"if_status,omitempty"`
	Status       *RunStatus    `json:"status,omitempty"`
	Continuation *Continuation `json:"continuation,omitempty"`
	FailureCode  *string       `json:"failure_code,omitempty"`
	Checkpoint   *string       `json:"checkpoint,omitempty"`
	Actor        string        `json:"actor,omitempty"`
}
