// Package agent is the leasekeeper daemon: it loads the configuration,
// opens the store, sweeps the claims of this host's dead workers and adopts
// those of live ones, then runs the heartbeat, the socket server and the
// reaper until it is told to stop.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	"github.com/leasekeeper/leasekeeper/plugins"
	"github.com/leasekeeper/leasekeeper/socketapi"
	"github.com/leasekeeper/leasekeeper/watchdog"
)

// Options are the run-time settings of Run that do not come from the
// config file.
type Options struct {
	// ConfigPath is the file the config came from; when set it is watched
	// and the live keys reload.
	ConfigPath string
	// Env is what the config is re-read with on reload.
	Env Environment
	// LogFormat is "text" (default) or "json".
	LogFormat string
	// LogOutput receives the logs; default os.Stderr.
	LogOutput io.Writer
	// PluginCommand, when set, is the argv that re-executes this binary as
	// the built-in store plugin (the hidden subcommand). Empty opens the
	// built-in stores in-process. A plugin binary named by store.backend is
	// always launched.
	PluginCommand []string
	// Version is reported by status.
	Version string
	// Clock defaults to board.SystemClock.
	Clock board.Clock
	// Ready, when set, is called once the agent serves (after the boot
	// sweep); tests and the systemd notification use it.
	Ready func()

	// boardCountEvery replaces BoardCountEvery (tests).
	boardCountEvery time.Duration
}

// ShutdownTimeout bounds how long a stopping agent waits for requests in
// flight and watch streams to end.
const ShutdownTimeout = 5 * time.Second

// Agent is one running daemon. Run builds and drives it.
type Agent struct {
	opts    Options
	live    *Live
	log     *slog.Logger
	clock   board.Clock
	host    string
	marker  string
	started time.Time
	prober  *pidprobe.Local

	store board.Store
	// boards is the agent's one copy of the board definition (boarddef.go).
	boards  *boardCache
	closeFn func() error
	backend apitype.Backend // what the status reports as the store
	// plugin is the store plugin's supervisor; nil when the store runs in
	// this process.
	plugin *plugins.Proxy

	hb     *heartbeat.Loop
	srv    atomic.Pointer[socketapi.Server]
	reaper *watchdog.Reaper
	// wakeReaper asks the reaper for a pass now (capacity 1: a wake while
	// one is pending is the same pass); the heartbeat signals it when it
	// has expired a dead owner's lease (DESIGN.md#owner-dead).
	wakeReaper chan struct{}
	// effects turns the store's event log into launch hints and one-shot
	// consumptions (effects.go).
	effects *Effects
	// pruner deletes old history in the background (retention.go).
	pruner *Pruner

	passMu   sync.Mutex
	lastPass *apitype.ReaperPass

	tickMu      sync.Mutex
	lastTick    *apitype.HeartbeatTick
	lastTickEnd time.Time

	metrics *metrics
	// stopCounter ends the board counter of the metrics and waits for it
	// (nil: none runs).
	stopCounter func()
	notify      *notifier
}

// NewLogger builds the agent's logger: slog text or JSON, its level read
// through level on every record so a reload applies at once.
func NewLogger(w io.Writer, format string, level slog.Leveler) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("%w: log format %q: want text or json", ErrConfig, format)
}

// Run runs the agent until ctx ends (the CLI cancels it on SIGTERM or
// SIGINT), then stops it. It returns an error only when the agent could not
// start or did not stop cleanly.
func Run(ctx context.Context, cfg Config, opts Options) error {
	a, err := start(ctx, cfg, opts)
	if errors.Is(err, errStoppedStarting) {
		return nil
	}
	if err != nil {
		return err
	}
	<-ctx.Done()
	return a.stop()
}

func start(ctx context.Context, cfg Config, opts Options) (_ *Agent, err error) {
	if opts.LogOutput == nil {
		opts.LogOutput = os.Stderr
	}
	if opts.Clock == nil {
		opts.Clock = board.SystemClock{}
	}
	live := NewLive(cfg)
	log, err := NewLogger(opts.LogOutput, opts.LogFormat, live.Level())
	if err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}
	host, err := pidprobe.Hostname()
	if err != nil {
		return nil, err
	}
	a := &Agent{
		opts:    opts,
		live:    live,
		log:     log,
		clock:   opts.Clock,
		host:    host,
		marker:  board.AgentMarker(host, os.Getpid()),
		started: opts.Clock.Now(),
		prober:  pidprobe.New(),
		notify:  newNotifier(log.With("component", "systemd")),
	}
	a.metrics = newMetrics(opts.Version, a.heldCount, live.ReaperEnabled)
	a.metrics.watchClaimAge(func() []heartbeat.Claim { return a.hb.Held() }, a.clock.Now)
	a.notify.checkInterval(cfg.Lease)
	starting := []any{"marker", a.marker, "socket", cfg.Socket, "backend", cfg.Store.Backend}
	if f := cfg.BoardFile(); f != "" {
		starting = append(starting, "board_file", f)
	}
	log.Info("agent starting", append(starting, "lease", cfg.Lease, "liveness", cfg.Liveness, "reaper_enabled", cfg.Reaper.Enabled)...)
	// A board on a tmpfs is refused before anything opens it
	// (DESIGN.md#board-on-disk).
	if err := checkBoardFS(cfg, log); err != nil {
		return nil, err
	}

	if err := a.openStoreRetrying(ctx, cfg); err != nil {
		return nil, err
	}
	if p, ok := a.store.(*plugins.Proxy); ok {
		a.plugin = p
		a.metrics.watchPlugin(p)
	}
	// Every component below reaches the store through the metered
	// wrapper, so the store metrics are counted in one place.
	metered := meteredStore{inner: a.store, m: a.metrics}
	a.boards = newBoardCache(metered.LoadBoard, BoardTTL)
	metered.boards = a.boards
	a.store = metered
	defer func() {
		if err != nil {
			a.hbStop()
			a.counterStop()
			a.pruner.Stop()
			a.effects.Stop()
			if a.reaper != nil {
				a.reaper.Stop()
			}
			if srv := a.srv.Load(); srv != nil {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
				_ = srv.Shutdown(sctx)
				cancel()
			}
			_ = a.closeFn()
		}
	}()

	// The stored board wins over the configured states; say so when they
	// differ (boarddef.go). A board the watchdog cannot work on fails here.
	stored, err := a.boards.Board(ctx)
	if err != nil {
		return nil, err
	}
	warnBoardDrift(log, cfg.Board, stored)
	if err := watchdog.CheckBoard(stored); err != nil {
		return nil, fmt.Errorf("reaper: %w", err)
	}

	a.wakeReaper = make(chan struct{}, 1)
	a.hb, err = heartbeat.New(heartbeat.Config{
		Store:  a.store,
		Clock:  a.clock,
		Lease:  live.Lease,
		Prober: a.prober,
		Mode:   func() heartbeat.Mode { return heartbeat.Mode(live.Liveness()) },
		OnLost: a.onLost,
		OnTick: a.recordTick,
		Logger: log.With("component", "heartbeat"),
	})
	if err != nil {
		return nil, err
	}

	// The boot sweep runs before the socket serves, so no worker can claim
	// (or be told about) a card while its previous owner is being judged.
	if err := a.bootSweep(ctx, cfg); err != nil {
		return nil, err
	}
	if err := a.hb.Start(ctx); err != nil {
		return nil, err
	}

	if err := a.initEffects(ctx); err != nil {
		return nil, err
	}
	srv, err := socketapi.New(socketapi.Config{
		Path:       cfg.Socket,
		Store:      a.store,
		Claims:     a.hb,
		Prober:     a.prober,
		Clock:      a.clock,
		Host:       host,
		Lease:      live.Lease,
		Liveness:   live.Liveness,
		Operators:  func() []uint32 { return cfg.Operators },
		Status:     a.status,
		ReaperPass: a.reaperPass,
		AfterWrite: a.wakeEffects,
		// Where GET /v1/events/head starts reading (DESIGN.md#waiting).
		EventHeadHint: a.effectsHead,
		Logger:        log.With("component", "socket"),
		// An operator's prune keeps what the effects layer has not
		// applied, as the background pruner does (DESIGN.md#retention).
		RetentionAge:   cfg.Retention.Age,
		KeepEventsFrom: func() int64 { return a.effects.Head() + 1 },
	})
	if err != nil {
		return nil, err
	}
	a.srv.Store(srv)

	a.reaper, err = watchdog.New(watchdog.Config{
		Store:           a.store,
		Board:           a.boards.Board,
		Marker:          a.marker,
		Host:            host,
		Interval:        cfg.Reaper.Interval,
		Batch:           cfg.Reaper.Batch,
		Lease:           live.Lease,
		OrphanGrace:     live.OrphanGrace,
		Enabled:         live.ReaperEnabled,
		Fleet:           a.store.Traits().Shared, // declared by the store (DESIGN.md#twins)
		UnleasedHorizon: cfg.UnleasedHorizon,
		Prober:          a.prober,
		Steady:          a.clock.Now,
		Logger:          log.With("component", "reaper"),
		OnPass:          a.recordPass,
		Wake:            a.wakeReaper,
	})
	if err != nil {
		return nil, fmt.Errorf("reaper: %w", err)
	}

	if err := srv.Start(ctx); err != nil {
		return nil, err
	}
	if err := a.reaper.Start(ctx); err != nil {
		return nil, err
	}
	if err := a.effects.Start(ctx); err != nil {
		return nil, err
	}
	// Retention starts once the effects layer has found its place in the
	// log: the pruner never deletes an event it has not applied
	// (DESIGN.md#retention). The policy is said once, whatever it is.
	log.Info("retention policy", "policy", cfg.Retention.String())
	a.pruner = NewPruner(PrunerConfig{
		Store:    a.store,
		Policy:   cfg.Retention,
		KeepFrom: func() int64 { return a.effects.Head() + 1 },
		Logger:   log.With("component", "retention"),
	})
	a.pruner.Start(ctx)
	if cfg.Metrics != "" {
		// The board-wide counts have no reader but the metrics: without a
		// listener the board is never listed for them.
		every := opts.boardCountEvery
		if every <= 0 {
			every = BoardCountEvery
		}
		counter := &boardCounter{
			count: a.store.CountCards,
			list: func(ctx context.Context) ([]board.Card, error) {
				return a.store.ListCards(ctx, board.ListCardsParams{})
			},
			boards: a.boards.Board,
			head:   a.effects.Head,
			every:  every,
			maxAge: BoardCountMaxAge,
			now:    a.clock.Now,
			log:    log.With("component", "metrics"),
		}
		a.metrics.watchBoard(counter)
		cctx, ccancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			counter.run(cctx)
		}()
		a.stopCounter = func() { ccancel(); <-done }
		if err := a.metrics.serve(ctx, cfg.Metrics, log.With("component", "metrics")); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	if opts.ConfigPath != "" {
		if err := WatchConfig(ctx, opts.ConfigPath, opts.Env, live, log.With("component", "config"), nil); err != nil {
			log.Warn("config file not watched: changes need a restart", "err", err)
		}
	}
	log.Info("agent ready", "socket", cfg.Socket, "held", len(a.hb.Held()))
	a.notify.ready()
	if opts.Ready != nil {
		opts.Ready()
	}
	return a, nil
}

func (a *Agent) hbStop() {
	if a.hb != nil {
		a.hb.Stop()
	}
}

// counterStop ends the board counter, if one runs, before the store closes.
func (a *Agent) counterStop() {
	if a.stopCounter != nil {
		a.stopCounter()
	}
}

// stop shuts the agent down without touching any claim: the workers are
// still alive, and the next agent adopts their claims at boot. Releasing
// them here would hand live workers' cards to someone else.
func (a *Agent) stop() error {
	a.log.Info("agent stopping: claims stay held for the next agent to adopt", "held", len(a.hb.Held()))
	a.notify.stopping()
	srv := a.srv.Load()
	srv.StopGranting()
	a.reaper.Stop()
	a.pruner.Stop()
	a.counterStop()
	a.effects.Stop()
	a.hb.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	var errs []error
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		errs = append(errs, fmt.Errorf("socket shutdown: %w", err))
	}
	if err := a.closeFn(); err != nil {
		errs = append(errs, fmt.Errorf("close store: %w", err))
	}
	a.log.Info("agent stopped")
	return errors.Join(errs...)
}

// onLost tells the claim's holder, over the watch stream, that it must stop.
func (a *Agent) onLost(l heartbeat.Lost) {
	a.log.Warn("claim lost", "card", l.Card, "epoch", l.Epoch, "marker", l.Marker, "reason", l.Reason)
	if l.Reason == heartbeat.LostOwnerDead {
		// The heartbeat has expired the dead owner's lease: the reaper
		// may judge the card now instead of at its next tick. Not for a
		// missed keepalive: that owner is only silent, not proved gone,
		// and may work on until the deadline it was last given, which a
		// pass at once would beat (DESIGN.md#keepalive).
		select {
		case a.wakeReaper <- struct{}{}:
		default:
		}
	}
	srv := a.srv.Load()
	if srv == nil {
		return
	}
	srv.Notify(apitype.Frame{
		Type:   apitype.FrameClaimLost,
		Card:   l.Card,
		Epoch:  l.Epoch,
		Marker: l.Marker,
		Reason: lostReason(l.Reason),
	})
}

// lostReason maps the heartbeat's reasons to the socket's vocabulary.
func lostReason(r heartbeat.LostReason) string {
	switch r {
	case heartbeat.LostReleased:
		return apitype.LostForceReleased
	case heartbeat.LostSuperseded:
		return apitype.LostConflict
	case heartbeat.LostUnconfirmed:
		return apitype.LostLeaseExpired
	case heartbeat.LostOwnerDead:
		return apitype.LostOwnerGone
	case heartbeat.LostKeepaliveMissed:
		return apitype.LostNoKeepalive
	}
	return string(r)
}

func (a *Agent) bootSweep(ctx context.Context, cfg Config) error {
	items, adopted, err := BootSweep(ctx, SweepConfig{
		Store:     a.store,
		Prober:    a.prober,
		Clock:     a.clock,
		Host:      a.host,
		SelfPID:   os.Getpid(),
		Lease:     a.live.Lease(),
		Keepalive: a.live.Liveness() == LivenessKeepalive,
		Logger:    a.log,
		Actor:     a.marker,
	})
	if err != nil {
		return err
	}
	a.metrics.bootSweep(items)
	for _, it := range items {
		lvl := slog.LevelInfo
		if it.Err != nil {
			lvl = slog.LevelWarn
		}
		a.log.Log(ctx, lvl, "boot sweep", "card", it.Card, "marker", it.Marker, "epoch", it.Epoch,
			"action", string(it.Action), "why", it.Why, "err", it.Err)
	}
	for _, it := range items {
		if it.Lost != "" {
			a.hb.Disown(heartbeat.Lost{Card: it.Card, Epoch: it.Epoch, Marker: it.Marker, Reason: it.Lost, Owner: it.Owner})
		}
	}
	for _, ad := range adopted {
		a.metrics.claims.note(ad.Hold, ad.ClaimedAt)
		if err := a.hb.Add(ad.Hold, ad.Owner, ad.AttemptStart, ad.Lease); err != nil {
			a.log.Warn("boot sweep: adoption refused by the heartbeat", "card", ad.Hold.Card, "err", err)
		}
	}
	return nil
}

// heldCount is the number of claims the heartbeat renews right now.
func (a *Agent) heldCount() int { return len(a.hb.Held()) }

// recordTick runs on the heartbeat's own goroutine after every tick: it
// feeds the metrics and the status, then pings the systemd watchdog, so the
// pings stop when the loop stops ticking.
func (a *Agent) recordTick(r heartbeat.TickResult) {
	end := a.clock.Now()
	took := end.Sub(r.Start)
	a.metrics.tick(r, took)
	if a.metrics.claims.size() > r.Held {
		// Forget the claims held no longer, so the record stays bounded
		// by the claims held even when nobody scrapes.
		a.metrics.claims.oldest(a.hb.Held(), end)
	}
	t := &apitype.HeartbeatTick{
		StartedAt:  r.Start,
		DurationMS: millis(took),
		Result:     tickResult(r),
		Held:       r.Held,
		Renewed:    r.Renewed,
		Lost:       len(r.Lost),
	}
	if r.Err != nil {
		t.Error = r.Err.Error()
	}
	a.tickMu.Lock()
	a.lastTick, a.lastTickEnd = t, end
	a.tickMu.Unlock()
	a.notify.tick()
}

// millis is d in fractional milliseconds, for the status durations.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// StatusProbeTimeout bounds the store round trip of a status request: a
// hung store must make the status say so, not hang the health check.
const StatusProbeTimeout = 2 * time.Second

// statusProbeCard is the card id the status probe reads. Any id works: the
// store answering "not found" proves it is reachable just as well as a card.
const statusProbeCard = "leasekeeper-status-probe"

// probeStore asks the store one cheap question and reports whether it
// answered.
func (a *Agent) probeStore(ctx context.Context) apitype.StoreHealth {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, StatusProbeTimeout)
	defer cancel()
	start := a.clock.Now()
	_, err := a.store.GetCard(ctx, board.GetCardParams{ID: statusProbeCard})
	h := apitype.StoreHealth{CheckMS: millis(a.clock.Now().Sub(start))}
	if err == nil || errors.Is(err, board.ErrNotFound) {
		h.Reachable = true
	} else {
		h.Error = probeError(ctx, parent, err)
	}
	if w := a.metrics.lastWrite.Load(); w != nil {
		h.LastWrite = &apitype.WriteInfo{At: w.At, Op: w.Op, OK: w.OK, Error: w.Err}
	}
	if a.plugin != nil {
		ps := a.plugin.Status()
		h.Plugin = &apitype.PluginInfo{State: ps.State, PID: ps.PID, Restarts: ps.Restarts, LastError: ps.LastError, Since: ps.Since}
	}
	return h
}

// probeError words a failed probe. The probe is a read: one that got no
// answer in time, or whose call broke before the answer came, wrote
// nothing, so a store's "outcome unknown ... may have landed", which is
// about writes, is not what happened: the store did not answer.
func probeError(probe, parent context.Context, err error) string {
	switch {
	case parent.Err() != nil:
		return fmt.Sprintf("the store did not answer a read before the status request was given up (%v)", context.Cause(parent))
	case errors.Is(err, context.DeadlineExceeded) || probe.Err() != nil:
		return fmt.Sprintf("the store did not answer a read within %s", StatusProbeTimeout)
	case errors.Is(err, board.ErrOutcomeUnknown):
		return "the store did not answer a read: the call broke off before its answer came (see the store plugin's state in `leasekeeper status`)"
	}
	return err.Error()
}

func (a *Agent) status(ctx context.Context) (apitype.Status, error) {
	cfg := a.live.Config()
	st := apitype.Status{
		Host:      a.host,
		PID:       os.Getpid(),
		Marker:    a.marker,
		Version:   a.opts.Version,
		StartedAt: a.started,
		Socket:    cfg.Socket,
		Backend:   a.backend,
		Liveness:  a.live.Liveness(),
		LeaseMS:   a.live.Lease().Milliseconds(),
		Reaper: apitype.ReaperInfo{
			Enabled:    a.live.ReaperEnabled(),
			IntervalMS: cfg.Reaper.Interval.Milliseconds(),
			Batch:      cfg.Reaper.Batch,
		},
		Claims: []apitype.HeldClaim{},
	}
	a.passMu.Lock()
	st.Reaper.LastPass = a.lastPass
	a.passMu.Unlock()
	st.Store = a.probeStore(ctx)
	now := a.clock.Now()
	st.Heartbeat.IntervalMS = (a.live.Lease() / 3).Milliseconds()
	a.tickMu.Lock()
	if a.lastTick != nil {
		t := *a.lastTick
		t.AgoMS = max(now.Sub(a.lastTickEnd), 0).Milliseconds()
		st.Heartbeat.LastTick = &t
	}
	a.tickMu.Unlock()
	for _, c := range a.hb.Held() {
		st.Claims = append(st.Claims, apitype.HeldClaim{
			Card:      c.Hold.Card,
			Marker:    c.Hold.Token.Marker,
			Epoch:     c.Hold.Token.Epoch,
			PID:       c.Owner.PID,
			TrustedMS: max(c.TrustedUntil.Sub(now), 0).Milliseconds(),
		})
	}
	st.ClaimsHeld = len(st.Claims)
	if srv := a.srv.Load(); srv != nil {
		st.Draining = srv.Draining()
	}
	return st, nil
}

func (a *Agent) reaperPass(ctx context.Context, dryRun bool) (apitype.ReaperPass, error) {
	res, err := a.reaper.RunOnce(ctx, dryRun)
	if err != nil {
		return apitype.ReaperPass{}, err
	}
	return passToAPI(res, res.Took), nil
}

// recordPass runs after every reaper pass. A dry run is an operator's
// question: it is neither counted nor shown as the last pass, which
// reports what the reaper did.
func (a *Agent) recordPass(res watchdog.PassResult) {
	if res.DryRun {
		return
	}
	a.metrics.pass(res, res.Took)
	p := passToAPI(res, res.Took)
	a.passMu.Lock()
	a.lastPass = &p
	a.passMu.Unlock()
	if n := len(res.Cards) + len(res.Sweeps); n > 0 {
		a.log.Info("reaper pass", "enabled", res.Enabled, "dry_run", res.DryRun, "cards", len(res.Cards), "sweeps", len(res.Sweeps))
	}
}

// passToAPI flattens a watchdog pass into the socket's report.
func passToAPI(res watchdog.PassResult, took time.Duration) apitype.ReaperPass {
	p := apitype.ReaperPass{
		DryRun:      res.DryRun,
		Gated:       !res.Enabled,
		StartedAt:   res.At,
		Examined:    len(res.Cards) + len(res.Sweeps),
		Decisions:   []apitype.ReaperDecision{},
		DurationMS:  millis(took),
		Actions:     map[string]int{},
		Sweeps:      map[string]int{},
		ClockWaitMS: millis(res.ClockWait),
	}
	if res.Reapers > 1 {
		p.Reapers = res.Reapers
	}
	for _, c := range res.Cards {
		p.Actions[string(c.Decision.Action)]++
		d := apitype.ReaperDecision{
			Card:       c.Card,
			PrevHolder: c.Prev.Marker,
			PrevEpoch:  c.Prev.Epoch,
			Action:     string(c.Outcome),
			Reason:     describeDecision(c),
			Applied:    appliedOutcome(c.Outcome),
			Error:      c.Error,
		}
		if d.Error == "" && c.Err != nil {
			d.Error = c.Err.Error()
		}
		p.Decisions = append(p.Decisions, d)
	}
	for _, s := range res.Sweeps {
		p.Sweeps[string(s.Sweep)+": "+string(s.Outcome)]++
		d := apitype.ReaperDecision{
			Card:       s.Card,
			PrevHolder: s.Marker,
			Action:     string(s.Sweep) + " sweep: " + string(s.Outcome),
			Applied:    appliedOutcome(s.Outcome),
			Reason:     describeSweep(s),
			Error:      s.Error,
		}
		if d.Error == "" && s.Err != nil {
			d.Error = s.Err.Error()
		}
		p.Decisions = append(p.Decisions, d)
	}
	return p
}

func appliedOutcome(o watchdog.Outcome) bool {
	switch o {
	case watchdog.OutcomeTransferred, watchdog.OutcomeFiled, watchdog.OutcomeReleased:
		return true
	}
	return false
}

// describeSweep explains a repair sweep's record: the disposition a
// reconciling sweep judged the card by, and where it filed it.
func describeSweep(s watchdog.SweepResult) string {
	if s.Decision == nil {
		return ""
	}
	out := fmt.Sprintf("%v (row %d): %s", s.Decision.Action, s.Decision.Row, s.Decision.Reason)
	if s.FiledTo != "" {
		out += " → " + s.FiledTo
	}
	return out
}

func describeDecision(c watchdog.CardResult) string {
	s := fmt.Sprintf("%v (row %d): %s", c.Decision.Action, c.Decision.Row, c.Decision.Reason)
	if c.FiledTo != "" {
		s += " → " + c.FiledTo
	}
	return s
}
