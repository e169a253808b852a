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
	// Wake, when set, asks the loop for a pass before the next interval
	// (a send while a pass is due is one more pass, not one per send). The
	// agent signals it when its heartbeat has expired a dead owner's lease,
	// so the card is judged now rather than at the next tick
	// (DESIGN.md#owner-dead).
	Wake <-chan struct{}
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
// one every Interval, and one whenever Config.Wake is signalled, until ctx
// ends or Stop is called.
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
	woken := false
	for {
		if _, err := r.runOnce(ctx, false, woken); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("watchdog: pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			woken = false
		case <-r.cfg.Wake:
			// The card the wake is about is in any reaper's share on a
			// fleet: this pass lists every share, or it would wait for
			// its own reaper's next interval (DESIGN.md#reaper-shares).
			woken = true
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
	return r.runOnce(ctx, dryRun, false)
}

// runOnce is RunOnce; everyShare lists every reaper's share of the fleet's
// expired claims instead of this reaper's own (a pass Config.Wake asked
// for).
func (r *Reaper) runOnce(ctx context.Context, dryRun, everyShare bool) (PassResult, error) {
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
	p := &pass{r: r, now: now, lease: r.cfg.Lease(), board: b, dryRun: dryRun, everyShare: everyShare}
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
