package agent

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// PruneStore is what the pruner calls: the store's clock, which every age
// is judged by (DESIGN.md#store-clock), and the retention verbs.
type PruneStore interface {
	Now(ctx context.Context) (time.Time, error)
	board.Retention
}

// PrunerConfig configures the background pruner (DESIGN.md#retention).
type PrunerConfig struct {
	Store  PruneStore
	Policy RetentionConfig
	// KeepFrom is the first event seq the pruner must keep: the event
	// after the last one the effects layer has applied.
	KeepFrom func() int64
	Logger   *slog.Logger
	// After replaces time.After (tests drive the passes with it).
	After func(time.Duration) <-chan time.Time
	// OnPass, when set, is told about every pass (tests).
	OnPass func(board.PruneResult, error)
}

// Pruner deletes, in the background, the runs of finished cards and the
// events older than the retention age, one bounded Prune per pass
// (DESIGN.md#retention). A pass that stops at its bound with more to
// prune is followed by the next after MorePause, not a whole interval, so
// a backlog drains without any one write holding the store long.
type Pruner struct {
	cfg    PrunerConfig
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// MorePause is the pause between two passes of a backlog.
const MorePause = time.Second

// NewPruner builds a pruner; Start runs it.
func NewPruner(cfg PrunerConfig) *Pruner {
	if cfg.After == nil {
		cfg.After = time.After
	}
	if cfg.KeepFrom == nil {
		cfg.KeepFrom = func() int64 { return 1 }
	}
	return &Pruner{cfg: cfg}
}

// Start runs the passes until Stop; a disabled policy runs nothing.
func (p *Pruner) Start(ctx context.Context) {
	if !p.cfg.Policy.Enabled() {
		return
	}
	ctx, p.cancel = context.WithCancel(ctx)
	p.done = make(chan struct{})
	go p.loop(ctx)
}

// Stop ends the passes and waits for the one in progress.
func (p *Pruner) Stop() {
	if p == nil || p.cancel == nil {
		return
	}
	p.once.Do(func() {
		p.cancel()
		<-p.done
	})
}

func (p *Pruner) loop(ctx context.Context) {
	defer close(p.done)
	wait := p.cfg.Policy.Interval
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.cfg.After(wait):
		}
		res, err := p.RunOnce(ctx)
		if p.cfg.OnPass != nil {
			p.cfg.OnPass(res, err)
		}
		switch {
		case errors.Is(err, board.ErrInvalidArgument):
			// The store cannot prune (a twin or a plugin without
			// retention): said once, not every interval.
			p.cfg.Logger.Warn("retention: the store cannot prune; the pruner stops until the agent restarts", "err", err)
			return
		case err != nil && ctx.Err() == nil:
			p.cfg.Logger.Warn("retention: pass failed; retrying next interval", "err", err)
		case res.Runs > 0 || res.Events > 0:
			p.cfg.Logger.Info("retention: pruned", "runs", res.Runs, "events", res.Events, "cards", len(res.Cards), "more", res.More)
		}
		wait = p.cfg.Policy.Interval
		if err == nil && res.More {
			wait = MorePause
		}
	}
}

// RunOnce is one pass: one Prune of what is older than the policy's age
// by the store's clock, bounded by PerPass, keeping the events the effects
// layer has not applied.
func (p *Pruner) RunOnce(ctx context.Context) (board.PruneResult, error) {
	now, err := p.cfg.Store.Now(ctx)
	if err != nil {
		return board.PruneResult{}, err
	}
	return p.cfg.Store.Prune(ctx, board.PruneParams{
		Before:   now.Add(-p.cfg.Policy.Age),
		Limit:    p.cfg.Policy.PerPass,
		KeepFrom: p.cfg.KeepFrom(),
	})
}
