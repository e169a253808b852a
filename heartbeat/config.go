package heartbeat

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// Renewer is the part of board.Store the loop writes through. Any
// board.Store is a Renewer.
type Renewer interface {
	RenewClaims(ctx context.Context, p board.RenewClaimsParams) ([]board.RenewResult, error)
	ExpireClaimOwned(ctx context.Context, p board.OwnedParams) error
	DisownClaimOwned(ctx context.Context, p board.OwnedParams) error
}

var _ Renewer = board.Store(nil)

// Mode is the agent's liveness mode.
type Mode string

const (
	// ModePID renews a claim while its owner's pid, matched with its start
	// time, is alive (the default).
	ModePID Mode = "pid"
	// ModeKeepalive renews a claim only while its owner's client pings. It
	// catches hung workers and works across pid namespaces.
	ModeKeepalive Mode = "keepalive"
)

// Valid reports whether m names a mode.
func (m Mode) Valid() bool { return m == ModePID || m == ModeKeepalive }

// MaxDefaultMargin caps the default margin, so long leases do not give away
// a tenth of themselves.
const MaxDefaultMargin = 2 * time.Second

// DefaultMargin is the margin used when Config.Margin is zero:
// min(lease/10, MaxDefaultMargin).
func DefaultMargin(lease time.Duration) time.Duration {
	return min(lease/10, MaxDefaultMargin)
}

// Config configures a Loop. Lease and Mode are functions so a hot-reloaded
// config is picked up on the next tick.
type Config struct {
	// Store receives one RenewClaims call per tick (none when nothing is
	// held), one ExpireClaimOwned per claim of a dead owner and one
	// DisownClaimOwned per claim of a silent one. Required.
	Store Renewer
	// Clock is the source of time for every deadline. Default
	// board.SystemClock (monotonic-safe, see the package doc).
	Clock board.Clock
	// Lease returns the lease to renew with; the tick interval is Lease()/3.
	// Required, and must return a positive duration when New is called.
	Lease func() time.Duration
	// Margin is subtracted from every trusted deadline. Zero means
	// DefaultMargin(lease). It must stay below half the lease.
	Margin time.Duration
	// KeepaliveWindow is how long after its last ping an owner still counts
	// as alive in keepalive mode. Zero means two tick intervals (2·lease/3):
	// a client that pings every lease/3 may miss one ping, not two.
	KeepaliveWindow time.Duration
	// Prober judges owners in pid mode. Default pidprobe.New().
	Prober pidprobe.Prober
	// Mode returns the liveness mode. Default: always ModePID.
	Mode func() Mode
	// OnLost is told about every claim the loop stops tracking for a reason
	// other than Remove. It runs on the ticking goroutine, after the claim
	// is gone from Held(); it must not call Stop.
	OnLost func(Lost)
	// OnTick, when set, receives every tick's result (metrics, status).
	OnTick func(TickResult)
	// Logger receives warnings (failed renewals, failed expiries). Default:
	// discard.
	Logger *slog.Logger
}

// withDefaults validates c and fills its defaults.
func (c Config) withDefaults() (Config, error) {
	if c.Store == nil {
		return c, fmt.Errorf("%w: Store is required", ErrInvalidConfig)
	}
	if c.Lease == nil {
		return c, fmt.Errorf("%w: Lease is required", ErrInvalidConfig)
	}
	lease := c.Lease()
	if lease <= 0 {
		return c, fmt.Errorf("%w: lease %v must be positive", ErrInvalidConfig, lease)
	}
	if c.Margin < 0 || c.Margin >= lease/2 {
		return c, fmt.Errorf("%w: margin %v must be in [0, lease/2 = %v)", ErrInvalidConfig, c.Margin, lease/2)
	}
	if c.KeepaliveWindow < 0 {
		return c, fmt.Errorf("%w: keepalive window %v must not be negative", ErrInvalidConfig, c.KeepaliveWindow)
	}
	if c.Mode != nil {
		if m := c.Mode(); !m.Valid() {
			return c, fmt.Errorf("%w: unknown liveness mode %q", ErrInvalidConfig, m)
		}
	}
	if c.Clock == nil {
		c.Clock = board.SystemClock{}
	}
	if c.Prober == nil {
		c.Prober = pidprobe.New()
	}
	if c.Mode == nil {
		c.Mode = func() Mode { return ModePID }
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}
