package watchdog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// Prober is the one question the oracle asks about a process: is the pid,
// matched with its start time, still the process that started the run?
// pidprobe.Local and pidprobetest.Fake satisfy it.
type Prober interface {
	Probe(ctx context.Context, pid int, startMillis int64) pidprobe.Liveness
}

// Oracle resolves a card's run for the decision table and promotes a run
// that still says running/queued to PROCESS_ORPHANED — only on proof that no
// live owner holds it (ADR-096 §3). Anything less than proof conserves: the
// run stays as it is and the table keeps the card (row 5).
type Oracle struct {
	Store board.Store
	Clock board.Clock
	// Host is this agent's host name; the pid proof applies only to runs
	// started on this host, because a pid means nothing elsewhere.
	Host   string
	Prober Prober
	// Lease is the configured claim lease.
	Lease func() time.Duration
	// OrphanGrace is how long after the owner's lease ended the run is
	// declared orphaned without a pid proof.
	OrphanGrace func() time.Duration
	// Actor stamps the run_updated event of a promotion.
	Actor  string
	Logger *slog.Logger
}

// Proof names why the oracle promoted a run ("" when it did not).
type Proof string

const (
	ProofNone       Proof = ""
	ProofPIDDead    Proof = "owner_pid_dead"
	ProofLeaseGrace Proof = "owner_lease_past_grace"
)

// Resolve loads card's last run. A running/queued run is promoted, with a
// CAS on the status it was read with, to failed_resumable when it has a
// checkpoint and to failed otherwise, with failure_code PROCESS_ORPHANED,
// when the oracle can prove no live owner. It returns (nil, nil) when the
// card records no run or the run is gone (ErrNotFound is the answer "no
// run", not a read error), and (nil, err) for a read error.
func (o *Oracle) Resolve(ctx context.Context, card board.Card) (*board.Run, error) {
	r, _, err := o.resolve(ctx, card, true)
	return r, err
}

// Preview is Resolve without the write: it returns the run as Resolve would
// leave it, for a dry run that must decide without writing anything.
func (o *Oracle) Preview(ctx context.Context, card board.Card) (*board.Run, error) {
	r, _, err := o.resolve(ctx, card, false)
	return r, err
}

func (o *Oracle) resolve(ctx context.Context, card board.Card, write bool) (*board.Run, Proof, error) {
	if card.LastRunID == "" {
		return nil, ProofNone, nil
	}
	r, err := o.Store.GetRun(ctx, card.LastRunID)
	if errors.Is(err, board.ErrNotFound) {
		return nil, ProofNone, nil
	}
	if err != nil {
		return nil, ProofNone, fmt.Errorf("read run %q of card %q: %w", card.LastRunID, card.ID, err)
	}
	if r.Status != board.RunRunning && r.Status != board.RunQueued {
		return &r, ProofNone, nil
	}
	proof := o.orphanProof(ctx, card, r)
	if proof == ProofNone {
		return &r, ProofNone, nil
	}
	to := board.RunFailed
	if r.Checkpoint != "" {
		to = board.RunFailedResumable
	}
	if !write {
		promoted := r
		promoted.Status, promoted.FailureCode = to, board.FailureProcessOrphaned
		return &promoted, proof, nil
	}
	from, code := r.Status, board.FailureProcessOrphaned
	updated, err := o.Store.UpdateRun(ctx, board.RunUpdate{
		ID: r.ID, IfStatus: &from, Status: &to, FailureCode: &code, Actor: o.Actor,
	})
	if err == nil {
		o.logger().Warn("watchdog: run promoted to PROCESS_ORPHANED",
			"card", card.ID, "run", r.ID, "from", from, "to", to, "proof", proof,
			"owner", r.Owner, "host", r.Host, "pid", r.PID)
		return &updated, proof, nil
	}
	// The CAS on the status lost (a late owner wrote its own verdict, which
	// must never be overwritten) or the write failed. Either way the run as
	// it is now is the truth to decide on; if it cannot be read, conserve.
	o.logger().Info("watchdog: orphan promotion not applied, re-reading the run",
		"card", card.ID, "run", r.ID, "err", err)
	again, rerr := o.Store.GetRun(ctx, r.ID)
	if errors.Is(rerr, board.ErrNotFound) {
		return nil, ProofNone, nil
	}
	if rerr != nil {
		return nil, ProofNone, fmt.Errorf("re-read run %q after a failed promotion: %w", r.ID, rerr)
	}
	return &again, ProofNone, nil
}

// orphanProof returns the proof that no live owner holds run r, or
// ProofNone. Two proofs exist and nothing else counts:
//
//   - the run was started on this host and its owner pid, matched with its
//     start time, is provably dead (Unknown and Alive both conserve);
//   - the owner's lease ended longer ago than the orphan grace. This is
//     sound only because every holder stops by its lease deadline on its
//     own: the agent declares a claim lost at its trusted deadline and the
//     client cancels by itself when it cannot hear the agent.
func (o *Oracle) orphanProof(ctx context.Context, card board.Card, r board.Run) Proof {
	if o.Prober != nil && r.Host != "" && r.Host == o.Host && r.PID > 1 {
		if o.Prober.Probe(ctx, r.PID, r.PIDStart) == pidprobe.Dead {
			return ProofPIDDead
		}
	}
	end, ok := o.ownerLeaseEnd(card, r)
	if !ok {
		return ProofNone
	}
	if o.Clock.Now().Sub(end) > o.grace() {
		return ProofLeaseGrace
	}
	return ProofNone
}

// ownerLeaseEnd bounds when the run owner's lease ended, from the card.
//
// When the card's claim is still the owner's marker, the owner process holds
// the card and its lease is the card's lease; a legacy claim (no lease) has
// no end to measure, and is never reaped by time (ADR-096 Consequences).
//
// When a later acquisition holds the card (a higher epoch, another marker),
// the owner's claim was gone by the time that acquisition happened — at
// claimed_at — and the owner could have renewed at most one lease beyond its
// loss (an operator's force-release can come before the lease ends), so its
// lease ended no later than claimed_at + lease.
//
// Anything else (a free card, an unrecorded epoch under another marker) has
// no bound, and the oracle conserves.
func (o *Oracle) ownerLeaseEnd(card board.Card, r board.Run) (time.Time, bool) {
	switch {
	case card.Claim == "":
		return time.Time{}, false
	case card.Claim == r.Owner:
		if card.ClaimLeaseUntil.IsZero() {
			return time.Time{}, false
		}
		return card.ClaimLeaseUntil, true
	case r.Epoch > 0 && card.ClaimEpoch > r.Epoch && !card.ClaimedAt.IsZero():
		return card.ClaimedAt.Add(o.lease()), true
	default:
		return time.Time{}, false
	}
}

func (o *Oracle) grace() time.Duration {
	if o.OrphanGrace == nil {
		return o.lease() / 3
	}
	return o.OrphanGrace()
}

func (o *Oracle) lease() time.Duration {
	if o.Lease == nil {
		return DefaultLease
	}
	return o.Lease()
}

func (o *Oracle) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}
