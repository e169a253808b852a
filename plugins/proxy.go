package plugins

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
	"github.com/leasekeeper/leasekeeper/storespec"
)

// LaunchConfig configures Launch.
type LaunchConfig struct {
	// Cmd returns a fresh, unstarted command for the plugin process; it is
	// called again for every restart. Its Env, when nil, is the agent's
	// environment. Stdout, Stderr and the parent-death signal are set by
	// Launch.
	Cmd func() *exec.Cmd
	// Child, when set, is handed to the plugin in its environment
	// (storespec.Env), where serve.ChildConfigFromEnv reads it.
	Child *storespec.Spec
	// Logger receives the supervisor's lines and the plugin's own log.
	// Nil discards them.
	Logger *slog.Logger
	// StartTimeout bounds one start: fork, handshake and the first round
	// trip (which includes opening the store). Default 30s.
	StartTimeout time.Duration
	// SocketDir is the directory under which each start makes the private
	// directory of the plugin's Unix socket. It must exist and be writable;
	// empty means the system's temporary directory (TMPDIR, else /tmp).
	SocketDir string
	// MinBackoff and MaxBackoff bound the delay before a restart. The delay
	// doubles after each crash of a plugin that did not stay up for
	// MaxBackoff, and restarts from MinBackoff otherwise.
	// Defaults 100ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// Protocols, when set, are the protocol versions offered to the plugin
	// (of those this build speaks); the highest both speak is used. Empty
	// offers every version: wire.ProtocolVersion, protocol 4 (the Calls stream,
	// before routing by labels) and the unary protocol 3, in which each
	// call is its own RPC rather than sharing a message on the Calls
	// stream.
	Protocols []int
}

func (c *LaunchConfig) setDefaults() error {
	if c.Cmd == nil {
		return errors.New("store plugin: LaunchConfig.Cmd is required")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = max(30*time.Second, c.MinBackoff)
	}
	for _, v := range c.Protocols {
		if _, ok := clientPlugins()[v]; !ok {
			return fmt.Errorf("store plugin: LaunchConfig.Protocols: this build does not speak protocol version %d", v)
		}
	}
	return nil
}

// State names of Status.State.
const (
	StateUp     = "up"
	StateDown   = "down"
	StateClosed = "closed"
)

// Status is what the agent's status shows about its store plugin.
type Status struct {
	// State is "up", "down" (crashed, restart pending) or "closed".
	State string `json:"state"`
	// PID of the running plugin process; 0 when down.
	PID int `json:"pid,omitempty"`
	// ProtocolVersion negotiated with the running plugin.
	ProtocolVersion int `json:"protocol_version,omitempty"`
	// Restarts counts successful restarts after a crash.
	Restarts int `json:"restarts"`
	// LastError is the last crash or failed restart, kept after recovery.
	LastError string `json:"last_error,omitempty"`
	// Since is when State last changed.
	Since time.Time `json:"since"`
}

// Proxy is the agent's board.Store when the store runs in a plugin
// process. It supervises the process: a crash fails the calls in flight
// with board.ErrOutcomeUnknown, later calls fail at once with
// ErrUnavailable, and the plugin is restarted with a bounded exponential
// backoff.
type Proxy struct {
	// verbs are the store's verbs through the supervisor (supervised).
	*verbs

	cfg LaunchConfig
	log *slog.Logger

	// ctx lives until Close; restarts run under it.
	ctx        context.Context
	cancel     context.CancelFunc
	supervised chan struct{} // closed when the supervisor returns

	mu      sync.Mutex
	cur     *instance    // nil while down
	traits  board.Traits // declared by the plugin at its first start
	status  Status
	changed chan struct{} // closed and replaced on every change of state
	closed  bool
}

var _ board.Store = (*Proxy)(nil)

// instance is one plugin process.
type instance struct {
	client  *plugin.Client
	runner  *childRunner
	store   *remoteStore
	started time.Time
	// broken is set when a call's transport failed: the plugin died or its
	// connection did, though the process may not be reaped yet. A broken
	// instance is down for callers and is killed, so the supervisor
	// replaces it.
	broken atomic.Bool
}

// usable reports whether calls may go to inst.
func (inst *instance) usable() bool { return !inst.broken.Load() && !inst.runner.exited() }

// Launch starts the store plugin, waits until it serves the store, and
// returns a supervising Proxy. A plugin binary that is missing, is not a
// leasekeeper store plugin, speaks another protocol version or fails to
// open its store is an error wrapping ErrStart that says which. ctx bounds
// the start only; the Proxy lives until Close.
func Launch(ctx context.Context, cfg LaunchConfig) (*Proxy, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	// The supervisor outlives Launch's ctx but keeps its values.
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Proxy{cfg: cfg, log: cfg.Logger, ctx: life, cancel: cancel, supervised: make(chan struct{})}
	p.verbs = newVerbs(supervisor{p})
	inst, err := p.start(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	p.cur = inst
	p.traits = inst.store.Traits()
	p.changed = make(chan struct{})
	p.status = Status{State: StateUp, PID: inst.runner.pid, ProtocolVersion: inst.client.NegotiatedVersion(), Since: time.Now()}
	go p.supervise(inst)
	return p, nil
}

// start runs one plugin process and makes its first round trip.
func (p *Proxy) start(ctx context.Context) (*instance, error) {
	cmd := p.cfg.Cmd()
	if cmd == nil {
		return nil, fmt.Errorf("%w: LaunchConfig.Cmd returned nil", ErrStart)
	}
	name := cmd.Path
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	env = append(env, wire.ParentPIDEnv+"="+strconv.Itoa(os.Getpid()))
	if p.cfg.Child != nil {
		kv, err := p.cfg.Child.Environ()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrStart, err)
		}
		env = append(env, kv)
	}
	r := newChildRunner(cmd)
	tail := &tailBuffer{max: 4096}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  wire.Handshake,
		VersionedPlugins: p.offered(),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		// go-plugin's placeholder command carries only its own variables
		// (magic cookie, protocol versions, socket directory): the plugin's
		// environment is the command's, plus those.
		SkipHostEnv: true,
		RunnerFunc: func(_ hclog.Logger, placeholder *exec.Cmd, _ string) (runner.Runner, error) {
			cmd.Env = append(env, placeholder.Env...)
			return r, nil
		},
		UnixSocketConfig: &plugin.UnixSocketConfig{TempDir: p.cfg.SocketDir},
		GRPCDialOptions:  wire.StaticWindowDialOptions,
		StartTimeout:     p.cfg.StartTimeout,
		Stderr:           tail,
		Logger:           hclogFor(p.log),
	})

	fail := func(err error) (*instance, error) {
		client.Kill()
		return nil, startError(name, err, tail.String())
	}
	// A cancelled ctx kills the child, which ends a start in progress.
	stop := context.AfterFunc(ctx, func() { _ = r.kill() })
	defer stop()

	rpc, err := client.Client()
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			err = fmt.Errorf("%w (%v)", cerr, err)
		}
		return fail(err)
	}
	raw, err := rpc.Dispense(wire.PluginName)
	if err != nil {
		return fail(err)
	}
	store, ok := raw.(*remoteStore)
	if !ok {
		return fail(fmt.Errorf("dispensed %T, not a store", raw))
	}
	loadCtx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	if err := store.load(loadCtx); err != nil {
		return fail(err)
	}
	return &instance{client: client, runner: r, store: store, started: time.Now()}, nil
}

// offered is the plugin set of the protocol versions cfg.Protocols names.
func (p *Proxy) offered() map[int]plugin.PluginSet {
	all := clientPlugins()
	if len(p.cfg.Protocols) == 0 {
		return all
	}
	out := make(map[int]plugin.PluginSet, len(p.cfg.Protocols))
	for _, v := range p.cfg.Protocols {
		if set, ok := all[v]; ok {
			out[v] = set
		}
	}
	return out
}

// startError says why a plugin did not start, in terms of what to fix.
func startError(name string, err error, stderr string) error {
	msg := err.Error()
	var hint string
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist), errors.Is(err, os.ErrPermission):
		hint = "the plugin binary is missing or not executable"
	case strings.Contains(msg, "incompatible API version"):
		hint = fmt.Sprintf("the plugin speaks another store protocol version (this agent speaks %d); rebuild it against this leasekeeper release", wire.ProtocolVersion)
	case strings.Contains(msg, "Failed to read any lines"), strings.Contains(msg, "exited before we could connect"):
		hint = "the plugin exited during start, before the handshake"
	case strings.Contains(msg, "Unrecognized remote plugin message"):
		hint = "the binary is not a leasekeeper store plugin"
	case strings.Contains(msg, "unsupported plugin protocol"):
		hint = "the plugin does not speak gRPC"
	}
	out := fmt.Sprintf("%v: %s", ErrStart, name)
	if hint != "" {
		out += ": " + hint
	}
	out += ": " + msg
	if stderr != "" {
		out += "\nplugin stderr (last lines):\n" + stderr
	}
	if cause := childFailure(stderr); cause != "" {
		// The plugin said why it gave up: that is the error, on one line;
		// go-plugin's account of the failed handshake is detail.
		return &startErr{msg: fmt.Sprintf("%s (store plugin %s exited during start)", cause, name), detail: out, err: err}
	}
	return &startErr{msg: out, detail: out, err: err}
}

// childFailure is the error a plugin serving through serve.Serve wrote to
// its stderr before exiting (its last line starting with
// wire.ServeErrPrefix), with that prefix cut; "" when there is none.
func childFailure(stderr string) string {
	lines := strings.Split(stderr, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if cause, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), wire.ServeErrPrefix); ok && cause != "" {
			return cause
		}
	}
	return ""
}

// startErr wraps ErrStart and the underlying cause.
type startErr struct {
	msg    string
	detail string
	err    error
}

func (e *startErr) Error() string   { return e.msg }
func (e *startErr) Unwrap() []error { return []error{ErrStart, e.err} }

// Detail is the whole account of the failed start: go-plugin's error and
// the plugin's last stderr lines.
func (e *startErr) Detail() string { return e.detail }

// supervise waits for the plugin to exit and restarts it, until Close.
func (p *Proxy) supervise(inst *instance) {
	defer close(p.supervised)
	backoff := p.cfg.MinBackoff
	for {
		select {
		case <-inst.runner.done:
		case <-p.ctx.Done():
			return
		}
		uptime := time.Since(inst.started)
		reason := "plugin process exited"
		if inst.runner.waitErr != nil {
			reason += ": " + inst.runner.waitErr.Error()
		}
		p.markDown(reason)
		p.log.Warn("store plugin exited; calls fail until it is restarted", "pid", inst.runner.pid, "error", reason, "uptime", uptime)
		inst.client.Kill() // releases go-plugin's goroutines and socket directory
		if uptime >= p.cfg.MaxBackoff {
			backoff = p.cfg.MinBackoff
		}
		for {
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-p.ctx.Done():
				t.Stop()
				return
			}
			backoff = min(backoff*2, p.cfg.MaxBackoff)
			next, err := p.start(p.ctx)
			if err != nil {
				if p.ctx.Err() != nil {
					return
				}
				p.recordError(err)
				p.log.Error("store plugin restart failed", "error", err, "next_attempt_in", backoff)
				continue
			}
			if !p.markUp(next) {
				next.client.Kill() // closed meanwhile
				return
			}
			p.log.Info("store plugin restarted", "pid", next.runner.pid)
			inst = next
			break
		}
	}
}

func (p *Proxy) markDown(reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.cur = nil
	p.status.State, p.status.PID, p.status.ProtocolVersion = StateDown, 0, 0
	p.status.LastError = reason
	p.status.Since = time.Now()
	p.notifyLocked()
}

func (p *Proxy) recordError(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status.LastError = err.Error()
}

// markUp installs a restarted plugin; false when the proxy was closed.
func (p *Proxy) markUp(inst *instance) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.cur = inst
	p.traits = inst.store.Traits()
	p.status.State = StateUp
	p.status.PID = inst.runner.pid
	p.status.ProtocolVersion = inst.client.NegotiatedVersion()
	p.status.Restarts++
	p.status.Since = time.Now()
	p.notifyLocked()
	return true
}

// Status reports whether the plugin is up, how often it was restarted and
// the last error.
func (p *Proxy) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// WaitUp blocks until the plugin is up (at once when it is), ctx ends or
// the proxy is closed.
func (p *Proxy) WaitUp(ctx context.Context) error {
	for {
		p.mu.Lock()
		closed, cur, changed := p.closed, p.cur, p.changed
		p.mu.Unlock()
		switch {
		case closed:
			return fmt.Errorf("%w: the proxy is closed", ErrUnavailable)
		case cur != nil && cur.usable():
			return nil
		}
		// Down, or exited and about to be marked down: wait for the next
		// change of state.
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// notifyLocked wakes every WaitUp; p.mu must be held.
func (p *Proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Close stops the plugin (gracefully, so it closes its store, then by
// SIGKILL) and the supervisor. Calls after Close fail with ErrUnavailable.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	cur := p.cur
	p.cur = nil
	p.status.State, p.status.PID = StateClosed, 0
	p.status.Since = time.Now()
	p.notifyLocked()
	p.mu.Unlock()

	p.cancel()
	<-p.supervised
	if cur != nil {
		cur.client.Kill()
	}
	return nil
}

// use returns the running plugin, or fails fast while it is down.
func (p *Proxy) use(verb string) (*instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return nil, fmt.Errorf("store plugin: %s: %w: the store is closed", verb, ErrUnavailable)
	case p.cur == nil || !p.cur.usable():
		last := p.status.LastError
		if last == "" {
			last = "plugin process exited"
		}
		return nil, fmt.Errorf("store plugin: %s: %w: the plugin is down and being restarted (%s); nothing was sent", verb, ErrUnavailable, last)
	}
	return p.cur, nil
}

// supervisor is the connection under the Proxy's verbs: every call goes
// to the running plugin, or fails fast while it is down. A call whose
// transport failed (not by the caller's ctx, and not an RPC the plugin
// answered or a request that could not be encoded: see callError)
// condemns the plugin: it is killed, so the supervisor restarts it, and
// calls fail fast meanwhile instead of each finding out the hard way.
type supervisor struct {
	p *Proxy
}

func (s supervisor) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	verb := path.Base(method)
	inst, err := s.p.use(verb)
	if err != nil {
		return err
	}
	err = inst.store.conn.Invoke(ctx, method, args, reply, opts...)
	if err != nil && brokenPlugin(err) && !inst.broken.Swap(true) {
		s.p.log.Warn("store plugin call failed in transit; replacing the plugin", "verb", verb, "pid", inst.runner.pid, "error", err)
		_ = inst.runner.kill()
		s.p.mu.Lock()
		if s.p.cur == inst {
			s.p.status.LastError = verb + " failed in transit: " + err.Error()
			s.p.notifyLocked()
		}
		s.p.mu.Unlock()
	}
	return err
}

// NewStream is not offered: the Store service's RPCs are all unary.
func (supervisor) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("store plugin: the supervisor carries no streams")
}
