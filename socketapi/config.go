package socketapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/lease"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// ClaimTracker is what the server needs from the heartbeat loop
// (lease.Tracker); *heartbeat.Loop satisfies it as is.
type ClaimTracker = lease.Tracker

// Prober reads the identity of a peer's pid. It is the part of
// pidprobe.Prober the server needs; pidprobe.Local satisfies it.
type Prober interface {
	Identify(ctx context.Context, pid int) (pidprobe.Identity, error)
}

// Config configures a Server. Functions are read on every use so the agent
// can hot-reload them.
type Config struct {
	// Path of the Unix socket.
	Path string
	// Store is the board store; the server never closes it.
	Store board.Store
	// Claims is the heartbeat loop's tracker.
	Claims ClaimTracker
	// Prober reads the identity of a peer's pid.
	Prober Prober
	// Clock must be the heartbeat loop's clock: the trusted time the server
	// reports is TrustedUntil − Clock.Now(). Default board.SystemClock.
	Clock board.Clock
	// Host is this host's name, the <host> of worker markers.
	Host string
	// Lease is the claim lease; pings go out every Lease()/3.
	Lease func() time.Duration
	// Liveness is "pid" or "keepalive" (apitype.LivenessPID, ...).
	Liveness func() string
	// Operators lists the uids allowed operator verbs. Default: root and
	// the agent's own uid.
	Operators func() []uint32
	// Status and ReaperPass serve the operator routes of the same names.
	Status     func(ctx context.Context) (apitype.Status, error)
	ReaperPass func(ctx context.Context, dryRun bool) (apitype.ReaperPass, error)
	// AfterWrite, when set, is called after every request that may have
	// written (any method but GET) once its handler is done, so a tailer of
	// the store's event log (the agent's effects layer) wakes at once
	// instead of waiting for its poll.
	AfterWrite func()
	// RetentionAge and KeepEventsFrom serve the operator's prune
	// (lease.Config; DESIGN.md#retention).
	RetentionAge   time.Duration
	KeepEventsFrom func() int64
	// Logger defaults to slog.Default().
	Logger *slog.Logger

	// MaxBodyBytes caps request bodies (default 1 MiB).
	MaxBodyBytes int64
	// FrameBuffer is how many claim_lost / launch frames the watch stream
	// keeps for resumption (default 1024).
	FrameBuffer int
	// EventHeadHint, when set, is a position no later than the event
	// log's head (the agent's effects layer's cursor), where the seek of
	// GET /v1/events/head starts (DESIGN.md#waiting); nil: the log's start.
	EventHeadHint func() int64
	// EventPoll is how often a following events stream polls the store for
	// writes made elsewhere (default 500ms).
	EventPoll time.Duration
}

// Defaults.
const (
	DefaultMaxBodyBytes = 1 << 20
	DefaultFrameBuffer  = 1024
	DefaultEventPoll    = 500 * time.Millisecond
	readHeaderTimeout   = 5 * time.Second
)

func (c *Config) validate() error {
	var errs []error
	if c.Path == "" {
		errs = append(errs, errors.New("field Path is empty"))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("field Store is nil"))
	}
	if c.Claims == nil {
		errs = append(errs, errors.New("field Claims is nil"))
	}
	if c.Prober == nil {
		errs = append(errs, errors.New("field Prober is nil"))
	}
	if c.Host == "" {
		errs = append(errs, errors.New("field Host is empty"))
	}
	if c.Lease == nil {
		errs = append(errs, errors.New("field Lease is nil"))
	} else if c.Lease() <= 0 {
		errs = append(errs, fmt.Errorf("field Lease is %v, want > 0", c.Lease()))
	}
	if c.Liveness == nil {
		c.Liveness = func() string { return apitype.LivenessPID }
	}
	switch m := c.Liveness(); m {
	case apitype.LivenessPID, apitype.LivenessKeepalive:
	default:
		errs = append(errs, fmt.Errorf("field Liveness is %q, want %q or %q", m, apitype.LivenessPID, apitype.LivenessKeepalive))
	}
	if c.Operators == nil {
		own := uint32(os.Getuid())
		c.Operators = func() []uint32 { return []uint32{0, own} }
	}
	if c.Clock == nil {
		c.Clock = board.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.FrameBuffer <= 0 {
		c.FrameBuffer = DefaultFrameBuffer
	}
	if c.EventPoll <= 0 {
		c.EventPoll = DefaultEventPoll
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("socketapi config: %w", err)
	}
	return nil
}
