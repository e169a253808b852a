package agent

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// Live holds the configuration values that reload without a restart: the
// lease, the reaper gate, the log level and the liveness mode. The loops
// read them through the accessor funcs on every use, so a reload takes
// effect on their next tick.
type Live struct {
	lease    atomic.Int64
	reaper   atomic.Bool
	liveness atomic.Pointer[string]
	grace    atomic.Int64
	level    slog.LevelVar
	current  atomic.Pointer[Config]
	// boot is the configuration the agent started with: the keys that do
	// not reload keep its values until a restart.
	boot Config
}

// NewLive starts from cfg.
func NewLive(cfg Config) *Live {
	l := &Live{boot: cfg}
	l.set(cfg)
	return l
}

func (l *Live) set(cfg Config) {
	l.lease.Store(int64(cfg.Lease))
	l.reaper.Store(cfg.Reaper.Enabled)
	mode := cfg.Liveness
	l.liveness.Store(&mode)
	l.grace.Store(int64(cfg.OrphanGrace))
	l.level.Set(cfg.LogLevel)
	c := cfg
	l.current.Store(&c)
}

// Apply installs the live keys of next and returns the keys that differ
// from the running configuration but only take effect after a restart (the
// socket, the store...). Config() keeps reporting what is in force.
func (l *Live) Apply(next Config) (restart []string) {
	restart = ReloadableDiff(l.boot, next)
	inForce := l.boot
	inForce.Lease = next.Lease
	inForce.Reaper.Enabled = next.Reaper.Enabled
	inForce.Liveness = next.Liveness
	inForce.LogLevel = next.LogLevel
	inForce.OrphanGrace = next.OrphanGrace
	inForce.Warnings = next.Warnings
	inForce.raw = next.raw
	l.set(inForce)
	return restart
}

// Config is the configuration last applied.
func (l *Live) Config() Config { return *l.current.Load() }

// Lease is the current claim lease.
func (l *Live) Lease() time.Duration { return time.Duration(l.lease.Load()) }

// ReaperEnabled is the current reaper gate.
func (l *Live) ReaperEnabled() bool { return l.reaper.Load() }

// Liveness is the current liveness mode.
func (l *Live) Liveness() string { return *l.liveness.Load() }

// OrphanGrace is the current orphan grace.
func (l *Live) OrphanGrace() time.Duration { return time.Duration(l.grace.Load()) }

// Level is the log level every handler of the agent consults.
func (l *Live) Level() *slog.LevelVar { return &l.level }
