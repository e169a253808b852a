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
// matched with its identity, still the process that started the run?
// pidprobe.Local and pidprobetest.Fake satisfy it.
type Prober interface {
	Probe(ctx context.Context, pid int, rec pidprobe.Identity) pidprobe.Liveness
}

// Oracle resolves the judged claim's run for the decision table and
// promotes a run that still says running to PROCESS_ORPHANED — only on
// proof that no live owner holds it (DESIGN.md#oracle). Anything less than proof
// conserves: the run stays as it is and the table keeps the card (row 5).
// A queued run is never promoted: it has not started, and row 5 never
// steals from it.
type Oracle struct {
	// Store is read (GetRun) and written (UpdateRun, the promotion) for
	// the judged claim's run: the run verbs are all the oracle calls.
	Store board.Runs
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

// Resolution is the judged claim's run as the oracle resolved it: the
// input of the decision table.
type Resolution struct {
	// Run is the run the judged claim started (after a promotion, if one
	// was made or previewed); nil when there is none.
	Run *board.Run
	// Err is the error reading it: the table conserves (row 1).
	Err error
	// Recorded is the run pointer the judged claim stamped; empty when it
	// stamped none (see ClaimRun).
	Recorded string
	Proof    Proof
}

// Stuck is the decision table's input for card with this resolution.
func (res Resolution) Stuck(card board.Card, b board.Board, now time.Time, lease time.Duration) StuckCard {
	return StuckCard{Run: res.Run, RunErr: res.Err, Card: card, RecordedRunID: res.Recorded, Board: b, Now: now, Lease: lease}
}

// ClaimRun reports which run pointer, if any, the judged claim of card
// stamped, and whether the run must be read to tell. The pointer belongs to
// the claim when it was stamped under the claim's epoch
// (Card.LastRunEpoch == Card.JudgedEpoch); a pointer from an earlier claim —
// a reopened card, a re-claim after a release — is "no run recorded for
// this claim", never this claim's verdict. A pointer stamped before its
// epoch was recorded, or a claim whose epoch is unknown, is judged by the
// run's own epoch once it is read (check).
func ClaimRun(card board.Card) (recorded string, check bool) {
	if card.LastRunID == "" {
		return "", false
	}
	judged := card.JudgedEpoch()
	switch {
	case judged == 0 || card.LastRunEpoch == 0:
		return card.LastRunID, judged != 0
	case card.LastRunEpoch != judged:
		return "", false
	default:
		return card.LastRunID, false
	}
}

// Preview resolves card's judged claim's run at the store's time now, and
// returns a running run as a promotion would leave it — to failed_resumable
// when it has a checkpoint, to failed otherwise, failure_code
// PROCESS_ORPHANED — when the oracle can prove no live owner. It writes
// nothing: a promotion is written only by ResolveAfterTransfer, once a
// transfer has proved the card as read still stood.
func (o *Oracle) Preview(ctx context.Context, card board.Card, now time.Time) Resolution {
	return o.resolve(ctx, card, now, true)
}

// Read resolves the judged claim's run without promoting anything.
func (o *Oracle) Read(ctx context.Context, card board.Card) Resolution {
	return o.resolve(ctx, card, time.Time{}, false)
}

// resolve reads card's judged claim's run; with preview, a running run is
// returned as a promotion would leave it, if the proof holds. Promoting is
// a decision the repair sweeps and the re-decision after a transfer never
// make on their own (Read), and a write only ResolveAfterTransfer makes.
func (o *Oracle) resolve(ctx context.Context, card board.Card, now time.Time, preview bool) Resolution {
	recorded, check := ClaimRun(card)
	if recorded == "" {
		return Resolution{}
	}
	r, err := o.Store.GetRun(ctx, board.GetRunParams{ID: recorded})
	if errors.Is(err, board.ErrNotFound) {
		// The pointer is the stamp: a run happened and is gone (row 2).
		return Resolution{Recorded: recorded}
	}
	if err != nil {
		return Resolution{Recorded: recorded, Err: fmt.Errorf("read run %q of card %q: %w", recorded, card.ID, err)}
	}
	if r.Card != "" && r.Card != card.ID {
		// The pointer names another card's run (two runs created with one
		// id on a store that cannot index it): its verdict is not this
		// card's to act on. A read error conserves (row 1).
		return Resolution{Recorded: recorded, Err: fmt.Errorf("run %q recorded on card %q belongs to card %q", recorded, card.ID, r.Card)}
	}
	if check && r.Epoch != 0 && r.Epoch != card.JudgedEpoch() {
		return Resolution{} // an earlier claim's run
	}
	res := Resolution{Run: &r, Recorded: recorded}
	if r.Status != board.RunRunning || !preview {
		return res
	}
	return o.promote(ctx, card, res, now, board.ClaimToken{})
}

// ResolveAfterTransfer resolves the run of observed — the card as the
// transfer from listed left it — and promotes it, judging the claim the
// transfer took over (listed). The promotion is made only here, after the
// transfer: before it, the listing's copy may be stale (another reaper
// returned the card and a new holder resumed the run since), and a
// promotion written then would mark a live holder's run orphaned. Once the
// transfer has landed, its compare-and-set proved listed was still the
// claim, still expired at now, and nobody else can start or resume the
// card's run. A run pointer that changed in between is not the run the
// proof is about, and is read plainly.
func (o *Oracle) ResolveAfterTransfer(ctx context.Context, listed, observed board.Card, now time.Time) Resolution {
	res := o.Read(ctx, observed)
	if res.Run == nil || res.Run.Status != board.RunRunning {
		return res
	}
	if was, _ := ClaimRun(listed); was != res.Recorded {
		return res
	}
	return o.promote(ctx, listed, res, now, observed.Token())
}

// promote promotes res.Run (running) to PROCESS_ORPHANED when orphanProof
// holds for the judged claim of card, writing it under the recovery claim
// tok (the transfer's: the store fences the write on it); with a zero tok
// it only returns the run as the promotion would leave it.
func (o *Oracle) promote(ctx context.Context, card board.Card, res Resolution, now time.Time, tok board.ClaimToken) Resolution {
	r := *res.Run
	recorded := res.Recorded
	proof := o.orphanProof(ctx, card, r, now)
	if proof == ProofNone {
		return res
	}
	to := board.RunFailed
	if r.Checkpoint != "" {
		to = board.RunFailedResumable
	}
	if tok.IsZero() {
		promoted := r
		promoted.Status, promoted.FailureCode = to, board.FailureProcessOrphaned
		return Resolution{Run: &promoted, Recorded: recorded, Proof: proof}
	}
	from, code := r.Status, board.FailureProcessOrphaned
	updated, err := o.Store.UpdateRun(ctx, board.UpdateRunParams{
		ID: r.ID, Token: tok, IfStatus: &from, Status: &to, FailureCode: &code, Actor: o.Actor,
	})
	if err == nil {
		o.logger().Warn("watchdog: run promoted to PROCESS_ORPHANED",
			"card", card.ID, "run", r.ID, "from", from, "to", to, "proof", proof,
			"owner", r.Owner, "host", r.Host, "pid", r.PID)
		return Resolution{Run: &updated, Recorded: recorded, Proof: proof}
	}
	// The CAS on the status lost (a late owner wrote its own verdict, which
	// must never be overwritten) or the write failed. Either way the run as
	// it is now is the truth to decide on; if it cannot be read, conserve.
	o.logger().Info("watchdog: orphan promotion not applied, re-reading the run",
		"card", card.ID, "run", r.ID, "err", err)
	again, rerr := o.Store.GetRun(ctx, board.GetRunParams{ID: r.ID})
	if errors.Is(rerr, board.ErrNotFound) {
		return Resolution{Recorded: recorded}
	}
	if rerr != nil {
		return Resolution{Recorded: recorded, Err: fmt.Errorf("re-read run %q after a failed promotion: %w", r.ID, rerr)}
	}
	return Resolution{Run: &again, Recorded: recorded}
}

// orphanProof returns the proof that no live owner holds run r, the run
// of card's judged claim, or ProofNone. Two proofs exist and nothing else
// counts:
//
//   - the run was started on this host under the judged claim, and its
//     pid, matched with its exact identity, is provably dead or names
//     another process (Unknown and Alive both conserve). A run the judged claim resumed records the pid of
//     the process that first started it, not of the one driving it now,
//     so its pid proves nothing;
//   - the judged claim's lease ended longer ago than the orphan grace.
//     This is sound only because every holder stops by its lease deadline
//     on its own: the agent declares a claim lost at its trusted deadline
//     and the client cancels by itself when it cannot hear the agent.
//
// now is the store's clock: the lease it measures against was stamped by
// the store, so the agent's own clock has no say in it.
func (o *Oracle) orphanProof(ctx context.Context, card board.Card, r board.Run, now time.Time) Proof {
	if o.Prober != nil && r.Host != "" && r.Host == o.Host && r.PID > 1 && r.Epoch != 0 && r.Epoch == card.JudgedEpoch() {
		// The run's exact identity of its owner (a run an older agent
		// recorded has only the inexact pid_start: pidprobe.Compare): a
		// process that took the pid since is not the owner, and its life
		// proves nothing about the owner's.
		owner := pidprobe.Identity{BootID: r.BootID, StartTicks: r.PIDStartTicks, StartMillis: r.PIDStart}
		if o.Prober.Probe(ctx, r.PID, owner) == pidprobe.Dead {
			return ProofPIDDead
		}
	}
	end, ok := judgedLeaseEnd(card)
	if !ok {
		return ProofNone
	}
	if now.Sub(end) > o.grace() {
		return ProofLeaseGrace
	}
	return ProofNone
}

// judgedLeaseEnd bounds, from the card alone, when the judged claim's
// lease ended:
//
//   - a worker's claim: its own lease (claim_lease_until). A legacy claim
//     (no lease) has no end to measure and is never reaped by time
//     (DESIGN.md#legacy-claims);
//   - a recovery claim judges the worker claim it took over, whose lease
//     had ended by the time of that transfer — the transfer's
//     compare-and-set required it — so it ended no later than the recovery
//     claim's claimed_at, which the store stamped at the transfer.
//
// Both are the store's stamps, never a bound computed from this agent's
// lease setting, which other agents need not share.
func judgedLeaseEnd(card board.Card) (time.Time, bool) {
	switch {
	case card.Claim == "":
		return time.Time{}, false
	case board.IsRecoveryMarker(card.Claim):
		return card.ClaimedAt, !card.ClaimedAt.IsZero()
	default:
		return card.ClaimLeaseUntil, !card.ClaimLeaseUntil.IsZero()
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
