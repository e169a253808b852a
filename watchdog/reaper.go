package watchdog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// Defaults of the reaper (the documented config defaults, docs/CONFIG.md).
const (
	DefaultInterval        = 60 * time.Second
	DefaultBatch           = 100
	DefaultLease           = 30 * time.Second
	DefaultUnleasedHorizon = 24 * time.Hour
	DefaultWorkers         = 16
	DefaultFleetWorkers    = 1
)

// Store is the part of the board store the watchdog calls: the reads, the
// recovery verbs (the store's clock, the listings, the transfer and the
// fenced release of an abandoned claim), the fenced writes it makes under
// its recovery claim (filing, give-up stamp, release) and the run verbs the
// oracle promotes with. Every board.Store is one; a test double implements
// only these.
type Store interface {
	board.CardReader
	board.Recovery
	board.OwnerWriter
	board.Runs
}

// Config configures a Reaper. Zero fields take the defaults above.
type Config struct {
	Store Store
	// Board reads the board definition a pass decides by, once at the
	// start of each pass: the agent's cache of it, which follows another
	// agent's state sweep within a bound. Nil reads Store.LoadBoard.
	Board func(ctx context.Context) (board.Board, error)
	// Marker is this agent's own marker (<host>-<pid>); the reaper holds
	// what it reclaims under board.RecoveryMarker(Marker).
	Marker string
	// Host is this agent's host, for the oracle's pid proof. Empty means
	// the host part of Marker.
	Host     string
	Interval time.Duration
	Batch    int
	// Workers bounds how many cards of one pass are worked on at once.
	// Each card's steps stay in order (resolve, pre-check, transfer,
	// decide, act, release) and every one of them is a durable write on
	// its own card, so cards of one pass are independent; run side by side
	// their writes reach the store together and its group commit folds
	// them into shared fsyncs, where one card after another would wait for
	// an fsync per write. 1 decides one card at a time.
	//
	// Zero means DefaultWorkers locally and DefaultFleetWorkers (one card
	// at a time) on the fleet: the MongoDB twin has no group commit to
	// share, and the fleet's reapers already work side by side, each on its
	// share of the expired claims (DESIGN.md#reaper-shares).
	Workers int
	// Lease is the configured claim lease (hot-reloaded).
	Lease func() time.Duration
	// OrphanGrace is how long past the owner's lease the oracle waits
	// before it declares a run orphaned without a pid proof (hot-reloaded);
	// nil means one heartbeat interval (lease/3).
	OrphanGrace func() time.Duration
	// Enabled is the gate (reaper.enabled, on by default, and the kill
	// switch LEASEKEEPER_REAPER; hot-reloaded: DESIGN.md#gate). Nil means
	// off: code that embeds the watchdog states the gate it wants.
	Enabled func() bool
	// Fleet selects the MongoDB twin's dispositions: a repark writes the
	// card back to the first pool state and is a fresh attempt under the
	// card's retry policy, whose max_attempts is the run ceiling
	// (DESIGN.md#retries), and the un-leased sweep runs
	// (DESIGN.md#twin-unleased).
	Fleet bool
	// UnleasedHorizon: the fleet's un-leased sweep selects claims whose
	// card was last updated longer ago than this. It may not be below one
	// lease: a missing lease is an absence, not positive evidence.
	UnleasedHorizon time.Duration
	Prober          Prober
	// Steady is this agent's monotonic clock (time.Now, whose readings
	// carry the monotonic clock), against which the reaper watches the
	// store's clock for steps before it decides by it
	// (DESIGN.md#clock-steps). Nil turns the watch off: for tests that
	// move the store's clock by hand and mean every pass to decide.
	Steady func() time.Time
	Logger *slog.Logger
	// OnPass, when set, is called after every pass with its result.
	OnPass func(PassResult)
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.Store == nil {
		return out, fmt.Errorf("%w: no store", ErrInvalidConfig)
	}
	if out.Board == nil {
		out.Board = out.Store.LoadBoard
	}
	if board.IsRecoveryMarker(out.Marker) {
		return out, fmt.Errorf("%w: agent marker %q is already a recovery marker", ErrInvalidConfig, out.Marker)
	}
	m, err := board.ParseAgentMarker(out.Marker)
	if err != nil {
		return out, fmt.Errorf("%w: agent marker: %w", ErrInvalidConfig, err)
	}
	if out.Host == "" {
		out.Host = m.Host
	}
	if out.Interval <= 0 {
		out.Interval = DefaultInterval
	}
	if out.Batch <= 0 {
		out.Batch = DefaultBatch
	}
	if out.Workers <= 0 {
		out.Workers = DefaultWorkers
		if out.Fleet {
			out.Workers = DefaultFleetWorkers
		}
	}
	if out.Lease == nil {
		out.Lease = func() time.Duration { return DefaultLease }
	}
	if out.Enabled == nil {
		out.Enabled = func() bool { return false }
	}
	if out.UnleasedHorizon == 0 {
		out.UnleasedHorizon = DefaultUnleasedHorizon
	}
	if out.UnleasedHorizon < out.Lease() {
		return out, fmt.Errorf("%w: unleased horizon %s is below one lease (%s)", ErrInvalidConfig, out.UnleasedHorizon, out.Lease())
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out, nil
}

// CheckBoard reports whether the watchdog can work on b: rows 2 and 10 file
// into the failed column by name, and a board without one cannot honour
// the table. Every pass checks the board it read; the agent checks the
// stored board at start, so a board without one fails there.
func CheckBoard(b board.Board) error {
	if !b.Has(board.StateFailed) {
		return fmt.Errorf("%w: the board has no %q state for the watchdog to file into", ErrInvalidConfig, board.StateFailed)
	}
	return nil
}

// Outcome is what a pass did with one card.
type Outcome string

const (
	// OutcomeDecided: a dry run decided and wrote nothing.
	OutcomeDecided Outcome = "decided"
	// OutcomeKept: the pre-check kept the card; nothing was transferred.
	OutcomeKept Outcome = "kept"
	// OutcomeSkippedConflict: the claim changed between the listing and the
	// transfer (a renewal, an operator, another agent's reaper) — a clean
	// skip.
	OutcomeSkippedConflict Outcome = "skipped-conflict"
	// OutcomeTransferred: the claim was transferred and the card is held
	// under the recovery claim until its lease ends (the one-time hold).
	OutcomeTransferred Outcome = "transferred"
	// OutcomeFiled: the card was filed and the recovery claim released.
	OutcomeFiled Outcome = "filed"
	// OutcomeReleased: the claim was released and nothing else written.
	OutcomeReleased Outcome = "released"
	// OutcomeError: a store call failed; a recovery claim already taken is
	// kept so the next pass retries.
	OutcomeError Outcome = "error"
)

// CardResult is the pass's record of one listed card.
type CardResult struct {
	Card string `json:"card"`
	// Prev is the claim the listing saw.
	Prev board.ClaimToken `json:"prev"`
	// Token is the recovery token the transfer minted (zero when there was
	// no transfer).
	Token    board.ClaimToken `json:"token,omitzero"`
	Run      string           `json:"run,omitempty"`
	PreCheck Decision         `json:"pre_check"`
	// Decision is the decision that counted: the one taken on the card the
	// transfer observed, or the pre-check when nothing was transferred.
	Decision Decision `json:"decision"`
	Outcome  Outcome  `json:"outcome"`
	// FiledTo is the state the card was filed into, if any.
	FiledTo string `json:"filed_to,omitempty"`
	Err     error  `json:"-"`
	Error   string `json:"error,omitempty"`
}

// Sweep names one of the ungated repair sweeps.
type Sweep string

const (
	SweepRecovery Sweep = "recovery"
	SweepUnleased Sweep = "unleased"
)

// SweepResult is the pass's record of one card a repair sweep considered.
type SweepResult struct {
	Sweep  Sweep  `json:"sweep"`
	Card   string `json:"card"`
	Marker string `json:"marker"`
	// Decision is the disposition a reconciling sweep judged the card by
	// (nil for a release-only repair).
	Decision *Decision `json:"decision,omitempty"`
	Outcome  Outcome   `json:"outcome"`
	// FiledTo is the state a reconciling sweep filed the card into.
	FiledTo string `json:"filed_to,omitempty"`
	Err     error  `json:"-"`
	Error   string `json:"error,omitempty"`
}

// PassResult is what one pass did.
type PassResult struct {
	// At is the store's time the pass judged by (Store.Now).
	At time.Time `json:"at"`
	// Took is how long the pass ran, on this agent's monotonic clock.
	Took time.Duration `json:"took"`
	// ClockWait, when not zero, is how much longer this reaper watches the
	// store's clock before it trusts it: the pass kept every card but
	// those whose owner is provably dead by its pid
	// (DESIGN.md#clock-steps). A dry run decides all the same.
	ClockWait time.Duration `json:"clock_wait,omitempty"`
	DryRun    bool          `json:"dry_run"`
	// Enabled is the gate as this pass read it; off, no card was decided.
	Enabled bool `json:"enabled"`
	// Cards and Sweeps are sorted by card (the cards of a pass are
	// worked on concurrently; the order says nothing about timing).
	Cards  []CardResult  `json:"cards"`
	Sweeps []SweepResult `json:"sweeps"`
	// Reapers, when above 1, is how many live reapers shared the expired
	// claims: the pass listed this reaper's share, the claims whose
	// board.ShareKey is ShareIndex modulo Reapers (DESIGN.md#reaper-shares).
	Reapers    int `json:"reapers,omitempty"`
	ShareIndex int `json:"share_index,omitempty"`
}

// Card returns the record of card id in the pass, if it was listed.
func (p PassResult) Card(id string) (CardResult, bool) {
	for _, c := range p.Cards {
		if c.Card == id {
			return c, true
		}
	}
	return CardResult{}, false
}

// Reaper is the fenced watchdog: a periodic pass over expired claims plus
// the ungated repair sweeps. Passes never overlap.
type Reaper struct {
	cfg      Config
	recovery string
	oracle   *Oracle

	passMu sync.Mutex // serialises passes: the loop and an operator's RunOnce
	// cursor is where the next gated pass resumes the expired listing
	// (guarded by passMu). Kept cards stay expired and write nothing, so a
	// listing that always started from the oldest lease would offer the
	// same kept cards first on every pass; paging on reaches every expired
	// claim within ceil(expired/Batch)+1 passes however many are kept.
	cursor string
	// steady watches the store's clock against Config.Steady (guarded by
	// passMu).
	steady steadiness

	lifeMu sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}

	// beforeTransfer, when set (tests only), runs between the listing and
	// the transfer of each card the pre-check did not keep. Cards run
	// concurrently, so it may be called from several goroutines at once.
	beforeTransfer func(board.Card)
}

// New validates cfg and returns a stopped Reaper.
func New(cfg Config) (*Reaper, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rec := board.RecoveryMarker(c.Marker)
	return &Reaper{
		cfg:      c,
		recovery: rec,
		oracle: &Oracle{
			Store: c.Store, Host: c.Host, Prober: c.Prober,
			Lease: c.Lease, OrphanGrace: c.OrphanGrace, Actor: rec, Logger: c.Logger,
		},
	}, nil
}

// RecoveryMarker is the marker this reaper holds reclaimed cards under.
func (r *Reaper) RecoveryMarker() string { return r.recovery }

// Start runs a pass at once — the startup sweep (DESIGN.md#sweeps) — and then
// one every Interval until ctx ends or Stop is called.
func (r *Reaper) Start(ctx context.Context) error {
	r.lifeMu.Lock()
	defer r.lifeMu.Unlock()
	if r.cancel != nil {
		return ErrAlreadyStarted
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	r.cancel, r.done = cancel, done
	go r.loop(ctx, done)
	return nil
}

// Stop ends the loop and waits for a pass in flight to return. It is safe
// to call on a stopped reaper.
func (r *Reaper) Stop() {
	r.lifeMu.Lock()
	defer r.lifeMu.Unlock()
	if r.cancel == nil {
		return
	}
	r.cancel()
	<-r.done
	r.cancel, r.done = nil, nil
}

func (r *Reaper) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	// The ticker only schedules passes; every lease comparison reads the
	// store's clock, once per pass.
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := r.RunOnce(ctx, false); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("watchdog: pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RunOnce runs one pass at the store's time, read once (Store.Now): every
// comparison of the pass against a store-stamped time — the expiry cutoff,
// the oracle's grace, the stamp window, a recovery hold's end, the
// un-leased horizon — uses that one reading, never the agent's clock.
//
// With the gate on it decides one page of expired claims — recovery claims
// among them, like any other — transfer first, then acts on the card the
// transfer observed; the next pass resumes the listing after this page.
// With the gate off it decides nothing and runs the repair sweeps instead.
// A dry run decides every expired claim as the gated pass would, gate on
// or off, and writes nothing (not even an orphan promotion); with the gate
// off it also reports what the repair sweeps would do.
//
// The listed cards are worked on side by side, at most Workers at a time,
// each through its own steps in order; the result lists them by card.
func (r *Reaper) RunOnce(ctx context.Context, dryRun bool) (PassResult, error) {
	r.passMu.Lock()
	defer r.passMu.Unlock()
	start := time.Now()
	res := PassResult{DryRun: dryRun, Enabled: r.cfg.Enabled()}
	var before time.Time
	if r.cfg.Steady != nil {
		before = r.cfg.Steady()
	}
	now, err := r.cfg.Store.Now(ctx)
	if err != nil {
		// No clock, no pass: every decision is a comparison with it.
		return res, fmt.Errorf("read the store's clock: %w", err)
	}
	res.At = now
	if r.cfg.Steady != nil {
		wait, step := r.steady.observe(now, before, r.cfg.Steady(), r.cfg.Lease(), r.oracle.grace())
		if step != 0 {
			r.cfg.Logger.Warn("watchdog: the store's clock stepped against this agent's; no decisions until it has run steadily for a lease and the orphan grace",
				"step", step, "wait", wait)
		}
		res.ClockWait = wait
	}
	b, err := r.cfg.Board(ctx)
	if err != nil {
		return res, fmt.Errorf("read the board definition: %w", err)
	}
	if err := CheckBoard(b); err != nil {
		return res, err
	}
	p := &pass{r: r, now: now, lease: r.cfg.Lease(), board: b, dryRun: dryRun}
	var errs []error
	p.unsteady = res.ClockWait > 0
	if res.Enabled || dryRun {
		listed, page, err := p.listExpired(ctx)
		res.Reapers, res.ShareIndex = page.Reapers, page.ShareIndex
		if page.ShareError != "" {
			r.cfg.Logger.Warn("watchdog: the store could not share the expired claims among the fleet's reapers; this pass lists every share (DESIGN.md#reaper-shares)",
				"err", page.ShareError)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("list expired claims: %w", err))
		}
		mode := modeDecide
		if dryRun {
			mode = modePreview
		}
		results := make([]CardResult, len(listed))
		done := r.each(ctx, len(listed), func(i int) {
			results[i] = p.reapOne(ctx, listed[i], mode)
		})
		for i, cr := range results {
			if done[i] { // else the pass was cancelled before this card began
				res.Cards = append(res.Cards, cr)
			}
		}
		slices.SortFunc(res.Cards, func(a, b CardResult) int { return strings.Compare(a.Card, b.Card) })
		if err := ctx.Err(); err != nil {
			return res, err
		}
	}
	if !res.Enabled {
		sw, err := p.sweepRecovery(ctx)
		res.Sweeps = append(res.Sweeps, sw...)
		errs = append(errs, err)
		if r.cfg.Fleet {
			sw, err := p.sweepUnleased(ctx)
			res.Sweeps = append(res.Sweeps, sw...)
			errs = append(errs, err)
		}
		slices.SortStableFunc(res.Sweeps, func(a, b SweepResult) int { return strings.Compare(a.Card, b.Card) })
	}
	res.Took = time.Since(start)
	if r.cfg.OnPass != nil {
		r.cfg.OnPass(res)
	}
	return res, errors.Join(errs...)
}

// pass is one pass's view of the world: the store's time, read once, and
// the configuration as the pass read it.
type pass struct {
	r      *Reaper
	now    time.Time
	lease  time.Duration
	board  board.Board
	dryRun bool
	// unsteady: the reaper does not trust the store's clock yet
	// (DESIGN.md#clock-steps), so the pass decides only cards whose owner
	// is provably dead by its pid, a proof no clock enters.
	unsteady bool
}

// holderGone reports whether the process the listed claim names ran on
// this agent's host and no process has its pid any more: whoever held the
// claim has stopped, whatever the clocks say. A pid that names a process,
// the claim's holder or one that took the pid since, proves nothing.
func (p *pass) holderGone(ctx context.Context, c board.Card) bool {
	m, err := board.ParseMarker(c.Claim)
	if err != nil || m.Host != p.r.cfg.Host || p.r.cfg.Prober == nil {
		return false
	}
	return p.r.cfg.Prober.Probe(ctx, m.PID, pidprobe.Identity{}) == pidprobe.Dead
}

// listExpired lists what this pass decides. A gated pass takes one page of
// this reaper's share (on a store several agents reap, the others list the
// rest: DESIGN.md#reaper-shares), resuming where the previous pass stopped
// and starting over once the listing ran out; it also returns how many
// reapers shared the listing and which share was this one's. A pass that
// does not trust the store's clock yet takes no share: it lists every
// reaper's, deciding only the cards whose holder is provably gone. A dry run
// walks the whole listing from the start, every reaper's share, and leaves
// the cursor alone.
func (p *pass) listExpired(ctx context.Context) ([]board.Card, board.ExpiredPage, error) {
	st := p.r.cfg.Store
	if !p.dryRun {
		q := board.ExpiredQuery{Cutoff: p.now, Limit: p.r.cfg.Batch, After: p.r.cursor}
		if !p.unsteady {
			// A reaper that does not trust the store's clock decides only
			// pid-proven cards: it takes no share, or nobody would decide
			// the rest of it while it waits (DESIGN.md#reaper-shares).
			q.Share = &board.ReaperShare{Reaper: p.r.cfg.Marker, Interval: p.r.cfg.Interval}
		}
		page, err := st.ListExpiredClaimCandidates(ctx, q)
		if err != nil {
			p.r.cursor = "" // a position the store no longer reads must not wedge the reaper
			return nil, board.ExpiredPage{}, err
		}
		p.r.cursor = page.Next
		return page.Cards, page, nil
	}
	var out []board.Card
	after := ""
	for {
		page, err := st.ListExpiredClaimCandidates(ctx, board.ExpiredQuery{Cutoff: p.now, Limit: p.r.cfg.Batch, After: after})
		out = append(out, page.Cards...)
		if err != nil || page.Next == "" || len(page.Cards) == 0 {
			return out, board.ExpiredPage{}, err
		}
		after = page.Next
	}
}

// mode is how reapOne treats a card.
type mode int

const (
	// modeDecide is the gated pass: the whole table, transfer first.
	modeDecide mode = iota
	// modePreview decides as modeDecide would and writes nothing.
	modePreview
	// modeRepair is a gate-off sweep reconciling a card it must not leave
	// free where it is: only a settled disposition (complete, fail,
	// repark) is carried out, after a transfer; everything else is kept.
	modeRepair
)

// settles reports the dispositions a repair sweep carries out: they leave
// the card where the run's own verdict says, which is what releasing the
// claim would have let the card's owner do.
func settles(a Action) bool {
	return a == ActionComplete || a == ActionFail || a == ActionRepark
}

// repairable is d as a repair sweep may carry it out: a settled
// disposition. The run ceiling — the retry policy's limit reached by a
// merely resumable run (rule attempts_spent, a give-up) — files the card to
// a sink on the watchdog's own judgement: a decision, which the gate
// stops. Anything else is kept.
func (p *pass) repairable(d Decision) Decision {
	why := ""
	switch {
	case d.Rule == RuleAttemptsSpent && d.Action == ActionGiveUp:
		why = fmt.Sprintf("a resumable run's card whose %s is filed to a sink, a decision the gate stops",
			board.RunRoute{Attempts: d.Attempts, MaxAttempts: d.MaxAttempts}.Why())
	case !settles(d.Action):
		why = "not a settled disposition"
	default:
		return d
	}
	return Decision{Action: ActionKeep, Row: d.Row, Rule: d.Rule, Reason: d.Reason + "; " + why + ": the repair sweep keeps it"}
}

// reapOne is one card: resolve its claim's run, pre-check, transfer, decide
// on the card the transfer observed, act.
func (p *pass) reapOne(ctx context.Context, listed board.Card, m mode) (cr CardResult) {
	defer func() {
		if cr.Err != nil {
			cr.Error = cr.Err.Error()
		}
	}()
	r := p.r
	cr = CardResult{Card: listed.ID, Prev: listed.Token()}

	// The pre-check sees the run as a promotion would leave it, but nothing
	// is written before the transfer: the listing's copy may be stale, and
	// a promotion is made only once the transfer has proved it is not
	// (Oracle.ResolveAfterTransfer). A repair sweep never promotes.
	var res Resolution
	if m == modeRepair {
		res = r.oracle.Read(ctx, listed)
	} else {
		res = r.oracle.Preview(ctx, listed, p.now)
	}
	cr.Run = res.Recorded
	in := res.Stuck(listed, p.board, p.now, p.lease)
	in.Fleet = r.cfg.Fleet
	if m == modeRepair {
		cr.PreCheck = p.repairable(DecideStuckCard(in))
	} else {
		cr.PreCheck = PreCheck(in)
	}
	if cr.PreCheck.Action == ActionKeep {
		cr.Decision, cr.Outcome = cr.PreCheck, OutcomeKept
		if m == modePreview {
			cr.Outcome = OutcomeDecided
		}
		return cr
	}
	if p.unsteady && m == modeDecide && res.Proof != ProofPIDDead && !p.holderGone(ctx, listed) {
		cr.Decision, cr.Outcome = Decision{Action: ActionKeep, Rule: RuleClockUnsteady,
			Reason: "the store's clock is not trusted yet (the reaper has just started, or the clock stepped): only a pid proof decides"}, OutcomeKept
		return cr
	}
	if m == modePreview {
		// What the real pass would decide if the transfer observed the
		// listing's copy unchanged.
		cr.Decision, cr.Outcome = AfterTransfer(DecideStuckCard(in), listed.Claim, Strands(p.board, listed.State)), OutcomeDecided
		return cr
	}

	if r.beforeTransfer != nil {
		r.beforeTransfer(listed)
	}
	// DESIGN.md#transfer-first: transfer first. Freeing an eligible card before its
	// disposition is decided would let the very tick we clean up after
	// re-dispatch it. The CAS carries the whole precondition — the claim is
	// still exactly the listed token and still expired at the store's time
	// — so a renewal, an operator or another agent's reaper in between is a
	// clean skip.
	observed, tok, err := r.cfg.Store.ReclaimExpired(ctx, board.Reclaim{
		Card: listed.ID, Prev: listed.Token(), RecoveryMarker: r.recovery, Cutoff: p.now, Lease: p.lease,
	})
	switch {
	case errors.Is(err, board.ErrClaimConflict):
		cr.Decision, cr.Outcome = cr.PreCheck, OutcomeSkippedConflict
		return cr
	case err != nil:
		cr.Decision, cr.Outcome, cr.Err = cr.PreCheck, OutcomeError, fmt.Errorf("transfer: %w", err)
		return cr
	}
	cr.Token = tok
	r.cfg.Logger.Warn("watchdog: reclaimed an expired claim",
		"card", listed.ID, "prev_marker", listed.Claim, "prev_epoch", listed.ClaimEpoch,
		"epoch", tok.Epoch, "lease_until", listed.ClaimLeaseUntil, "pre_check", cr.PreCheck.Rule)

	// DESIGN.md#observed-card: the decision that counts is taken on the card the
	// transfer observed, never on the listing's copy — an operator may have
	// moved it in between. The run is read again for the pointer the
	// observed card records (the owner may have stamped a new one before
	// the transfer fenced it out), and promoted now if the proof holds for
	// the claim the transfer took over. The transfer carried the judged
	// epoch over (RecoveredEpoch), so the same claim is judged.
	var res2 Resolution
	if m == modeRepair {
		res2 = r.oracle.Read(ctx, observed)
	} else {
		res2 = r.oracle.ResolveAfterTransfer(ctx, listed, observed, p.now)
	}
	cr.Run = res2.Recorded
	in2 := res2.Stuck(observed, p.board, p.now, p.lease)
	in2.Fleet = r.cfg.Fleet
	// The transfer re-stamped claimed_at; the window is the listed
	// claim's, or the transfer would re-open it.
	in2.ClaimStart = listed.ClaimedAt
	d := DecideStuckCard(in2)
	if m == modeRepair {
		d = p.repairable(d)
	}
	cr.Decision = AfterTransfer(d, listed.Claim, Strands(p.board, observed.State))
	p.act(ctx, &cr, observed, tok, res2.Recorded)
	return cr
}

// each runs fn(0) … fn(n-1) on at most Workers goroutines and waits for
// them. It starts no new index once ctx is done; done reports which ones
// ran. fn must touch only what belongs to its own index.
func (r *Reaper) each(ctx context.Context, n int, fn func(i int)) (done []bool) {
	done = make([]bool, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(r.cfg.Workers, n) {
		wg.Go(func() {
			for i := range next {
				fn(i)
				done[i] = true
			}
		})
	}
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return done
}

// act carries out cr.Decision with the recovery token. A failed filing
// keeps the recovery claim, so a later pass — which lists it once its
// lease ends — retries; a successful one releases it. No path here leaves
// the card free in a column nothing picks up (Strands): what would be a
// bare release there files the card back to the first pool state.
func (p *pass) act(ctx context.Context, cr *CardResult, c board.Card, tok board.ClaimToken, runID string) {
	r := p.r
	d := cr.Decision
	switch d.Action {
	case ActionKeep:
		// The hold: leave the lease as the transfer set it, so a pass after
		// it ends lists the card again and judges it under the spent-hold
		// rule (AfterTransfer).
		cr.Outcome = OutcomeTransferred
		return
	case ActionRelease:
		// The claimant stopped before launching (row 4) or a spent hold:
		// the card is simply eligible again — in the pool, where the
		// column it sits in is not one.
		if Strands(p.board, c.State) && !p.file(ctx, cr, c, tok, p.board.FirstPool(), board.ReasonWatchdog) {
			return
		}
	case ActionComplete, ActionFail, ActionGiveUp:
		if !p.file(ctx, cr, c, tok, d.Target, d.StateReason) {
			return
		}
		// The stamp goes on after the move (a state move clears gave_up),
		// and only on a card that sits in the filing's column: a card an
		// operator moved elsewhere, or one already in another sink, keeps
		// its own story. A give-up always leaves one (row 2's names the
		// gone run); a failure leaves one when the retry policy's attempts
		// are spent (DESIGN.md#retries).
		var stamp *board.GaveUp
		if d.Stamp != (board.GaveUp{}) {
			stamp = &d.Stamp
		} else if d.Action == ActionGiveUp {
			stamp = GiveUpStamp(c, runID, p.now)
		}
		if stamp != nil && (cr.FiledTo == d.Target || c.State == d.Target) {
			if err := r.cfg.Store.SetGaveUpOwned(ctx, c.ID, tok, stamp); err != nil {
				cr.Outcome, cr.Err = OutcomeError, fmt.Errorf("stamp gave_up: %w", err)
				return
			}
		}
	case ActionRepark:
		// DESIGN.md#twin-repark: the twins diverge on purpose. Locally a
		// resumable run's repark is a release only — in_progress is a pool
		// state there and the local re-claim resumes the run the card
		// records, so returning it costs no attempt. On the fleet the
		// launcher cannot resume a recorded run, so the card goes back to
		// the first pool state (a fresh run, an attempt: the table files it
		// to the ceiling state instead once they are spent). A local board
		// whose running column is not a pool state is reparked like the
		// fleet, or the release would strand the card there. A retry
		// (DESIGN.md#retries) is a fresh attempt on either twin: the card
		// goes to the first pool state with its backoff stamped.
		if d.Retry || r.cfg.Fleet || Strands(p.board, c.State) {
			if !p.fileMove(ctx, cr, c, tok, p.board.FirstPool(), d.StateReason, d.Retry) {
				if !d.Retry || !errors.Is(cr.Err, board.ErrInvalidArgument) {
					return
				}
				// A store that cannot carry a retry's move (a plugin from
				// before the retry policy: the agent's guard refuses it,
				// nothing sent) would refuse it on every pass, the card
				// stranded under the recovery claim (DESIGN.md#never-stranded).
				// The failure is filed as it was before the policy: failed,
				// the run's own verdict, where a person reaches it.
				r.cfg.Logger.Warn("watchdog: the store cannot carry a retry; filing the failure as it was before the retry policy",
					"card", c.ID, "err", cr.Err)
				cr.Outcome, cr.Err = "", nil
				cr.Decision.Action, cr.Decision.Rule, cr.Decision.Retry = ActionFail, RuleRunFailed, false
				cr.Decision.Target, cr.Decision.StateReason = board.StateFailed, board.ReasonRunFailed
				cr.Decision.Reason += "; the store cannot carry a retry (a plugin from before the retry policy): filed failed as before it"
				if !p.file(ctx, cr, c, tok, board.StateFailed, board.ReasonRunFailed) {
					return
				}
			}
		}
	default:
		cr.Outcome, cr.Err = OutcomeError, fmt.Errorf("unknown action %q", d.Action)
		return
	}
	p.release(ctx, cr, c, tok)
}

// file moves c to target under the recovery token, unless NeedsFiling says
// there is nothing to write. It reports whether the pass should go on to
// release; on an error it records it and the recovery claim is kept.
func (p *pass) file(ctx context.Context, cr *CardResult, c board.Card, tok board.ClaimToken, target string, reason board.Reason) bool {
	return p.fileMove(ctx, cr, c, tok, target, reason, false)
}

// fileMove is file, the move a retry when retry is set: the store stamps
// the card's backoff with it (DESIGN.md#retries).
func (p *pass) fileMove(ctx context.Context, cr *CardResult, c board.Card, tok board.ClaimToken, target string, reason board.Reason, retry bool) bool {
	r, b := p.r, p.board
	if !NeedsFiling(b, c, target) {
		if retry && target == c.State && !b.IsTerminal(c.State) {
			// A retry of a card run where it sat (in the first pool
			// state) moves nothing but backs off all the same: the store
			// stamps the backoff alone (DESIGN.md#retries).
			if _, err := r.cfg.Store.SetStateOwned(ctx, board.OwnedMove{
				Card: c.ID, Token: tok, To: target, From: c.State, Reason: reason, Retry: true,
			}); err != nil {
				cr.Outcome, cr.Err = OutcomeError, fmt.Errorf("stamp the retry's backoff in %s: %w", target, err)
				return false
			}
		}
		return true
	}
	// DESIGN.md#verdict-provenance: a launch-column target never carries a reason
	// that fires. Blank, the store stamps watchdog for a recovery marker;
	// a machine reason (a retry's) fires nothing and is kept.
	if b.IsLaunch(target) && !board.IsMachineReason(reason) {
		reason = board.ReasonNone
	}
	changed, err := r.cfg.Store.SetStateOwned(ctx, board.OwnedMove{
		Card: c.ID, Token: tok, To: target, From: c.State, Reason: reason, Retry: retry,
	})
	if err != nil {
		cr.Outcome, cr.Err = OutcomeError, fmt.Errorf("file %s → %s: %w", c.State, target, err)
		return false
	}
	if !changed {
		// The card left the state the transfer observed: an operator moved
		// it after the transfer. Their move wins and the claim is released
		// — unless the card now sits where a free card is stranded: then
		// the recovery claim stays, and the card is judged again, in its
		// new column, once that claim's lease ends.
		cur, err := r.cfg.Store.GetCard(ctx, c.ID)
		if err != nil || Strands(b, cur.State) {
			cr.Outcome = OutcomeTransferred
			cr.Decision.Reason += fmt.Sprintf("; the card was moved during the filing (to %q): held under the recovery claim rather than left free there", cur.State)
			cr.Err = err
			return false
		}
		r.cfg.Logger.Info("watchdog: card moved during filing, honouring the move",
			"card", c.ID, "observed", c.State, "now", cur.State, "target", target)
		return true
	}
	cr.FiledTo = target
	r.cfg.Logger.Info("watchdog: card filed", "card", c.ID, "from", c.State, "to", target,
		"reason", reason, "rule", cr.Decision.Rule)
	return true
}

// release drops the recovery claim. The outcome is filed when a filing
// preceded it, released otherwise.
func (p *pass) release(ctx context.Context, cr *CardResult, c board.Card, tok board.ClaimToken) {
	if err := p.r.cfg.Store.ReleaseOwned(ctx, c.ID, tok); err != nil {
		cr.Outcome, cr.Err = OutcomeError, fmt.Errorf("release: %w", err)
		return
	}
	if cr.FiledTo != "" {
		cr.Outcome = OutcomeFiled
	} else {
		cr.Outcome = OutcomeReleased
	}
}

// sweepRecovery is the gate-off repair of abandoned recovery claims
// (DESIGN.md#recovery-sweep). A recovery claim is abandoned when its lease has ended
// (or was stripped by a foreign write): nobody renews a recovery claim, so
// its holder — a reaper that died or was switched off — is done with it.
// Releasing it is a pure return to the card's pre-watchdog state:
// release-only, in one CAS on the whole precondition (this marker, this
// epoch, still expired), so an owner that re-took the card to retry a
// filing keeps it. Where that release would leave the card free in a
// column nothing picks up (Strands), the sweep is the only reconciler
// there is: it carries out a settled disposition of the claim's run or
// keeps the card (modeRepair). With the gate on this sweep does not run:
// recovery claims are decided like any expired claim.
//
// The population is every recovery claim, from an index by marker
// (RecoveryOnly), so the sweep reads O(recovery claims) whatever else the
// store holds and also finds the ones a foreign write stripped of their
// lease on the fleet.
func (p *pass) sweepRecovery(ctx context.Context) ([]SweepResult, error) {
	// ClaimedOnly is implied by RecoveryOnly; it is named as well so that
	// a plugin built before RecoveryOnly existed, which drops the field,
	// still lists claimed cards only instead of the whole board.
	cands, err := p.r.cfg.Store.ListCards(ctx, board.CardFilter{ClaimedOnly: true, RecoveryOnly: true})
	if err != nil {
		return nil, fmt.Errorf("recovery sweep: list recovery claims: %w", err)
	}
	var abandoned []board.Card
	for _, c := range cands {
		// The marker check stays although the store selected by it: a
		// store that lists more than it was asked (that older plugin)
		// must not make the sweep release a worker's claim.
		if !board.IsRecoveryMarker(c.Claim) || (!c.LeaseExpired(p.now) && !c.ClaimLeaseUntil.IsZero()) {
			continue
		}
		abandoned = append(abandoned, c)
	}
	out := make([]SweepResult, len(abandoned))
	// Cards are independent: side by side, their writes share commits.
	p.r.each(context.WithoutCancel(ctx), len(abandoned), func(i int) {
		c := abandoned[i]
		out[i] = SweepResult{Sweep: SweepRecovery, Card: c.ID, Marker: c.Claim}
		if Strands(p.board, c.State) {
			p.reconcile(ctx, &out[i], c)
			return
		}
		p.releaseExpired(ctx, &out[i], c)
	})
	return out, nil
}

// sweepUnleased (fleet only, gate off) repairs ordinary claims a
// mixed-fleet write stripped of lease and fence — their holder can neither
// renew, write nor release them (DESIGN.md#unleased-sweep). The query selects only
// running-column cards with a recorded run, and the sweep acts only on a
// settled disposition (complete, fail, repark), which it carries out
// itself after a transfer: released bare, the card would sit free in the
// running column, which is not a pool state on the fleet, and nothing else
// here would ever file it. Everything else stays conserved: a kept claim
// (pause brake, operator cancel, armed continuation) is load-bearing, and
// a pruned pointer is a decision the gate stops. The run is read plainly —
// promoting it would be a decision.
func (p *pass) sweepUnleased(ctx context.Context) ([]SweepResult, error) {
	cards, err := p.r.cfg.Store.ListUnleasedRunningClaims(ctx, p.now.Add(-p.r.cfg.UnleasedHorizon), p.r.cfg.Batch)
	if err != nil {
		return nil, fmt.Errorf("unleased sweep: %w", err)
	}
	var out []SweepResult
	for _, c := range cards {
		if board.IsRecoveryMarker(c.Claim) {
			continue // the recovery sweep's population
		}
		sr := SweepResult{Sweep: SweepUnleased, Card: c.ID, Marker: c.Claim}
		p.reconcile(ctx, &sr, c)
		out = append(out, sr)
	}
	return out, nil
}

// reconcile is a repair sweep's decision-free filing: reapOne in
// modeRepair, reported as a sweep result.
func (p *pass) reconcile(ctx context.Context, sr *SweepResult, c board.Card) {
	m := modeRepair
	if p.dryRun {
		m = modePreview
	}
	cr := p.reapOne(ctx, c, m)
	if p.dryRun && cr.Decision.Action != ActionKeep {
		cr.Decision = p.repairable(cr.Decision)
	}
	sr.Decision, sr.Outcome, sr.FiledTo, sr.Err, sr.Error = &cr.Decision, cr.Outcome, cr.FiledTo, cr.Err, cr.Error
}

// releaseExpired is the recovery sweep's release-only verb: one CAS on the
// claim as listed and still expired at the pass's time.
func (p *pass) releaseExpired(ctx context.Context, sr *SweepResult, c board.Card) {
	if p.dryRun {
		sr.Outcome = OutcomeDecided
		return
	}
	// The state is in the precondition: the release is safe only because
	// the card's column is one a free card may sit in (not Strands), and an
	// operator may move it between the listing and the release.
	err := p.r.cfg.Store.ReleaseExpired(ctx, board.ExpiredRelease{Card: c.ID, Prev: c.Token(), Cutoff: p.now, State: c.State, Actor: p.r.recovery})
	switch {
	case errors.Is(err, board.ErrClaimConflict), errors.Is(err, board.ErrTransitionRejected):
		sr.Outcome = OutcomeSkippedConflict
	case err != nil:
		sr.Outcome, sr.Err, sr.Error = OutcomeError, err, err.Error()
	default:
		sr.Outcome = OutcomeReleased
		p.r.cfg.Logger.Warn("watchdog: released an abandoned recovery claim", "card", sr.Card, "marker", sr.Marker, "epoch", c.ClaimEpoch)
	}
}
