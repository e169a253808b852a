package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
	"github.com/leasekeeper/leasekeeper/storespec"
)

// StoreLockTimeout bounds the wait for the bbolt file lock. bbolt waits
// forever by default, and a plugin process orphaned by a killed agent may
// still hold the lock for a moment (DESIGN.md#bolt-lock, DESIGN.md#parent-death).
const StoreLockTimeout = 10 * time.Second

// OpenBuiltinStore opens bolt or mongo in this process. The agent calls it
// in the plugin child (the hidden subcommand) or in-process.
func OpenBuiltinStore(ctx context.Context, spec storespec.Spec, clock board.Clock) (board.Store, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	switch spec.Backend {
	case BackendBolt:
		if dir := filepath.Dir(spec.Path); dir != "" {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return nil, fmt.Errorf("store.path: %w", err)
			}
		}
		s, err := boltstore.Open(spec.Path, boltstore.Options{Board: spec.Board, Clock: clock, LockTimeout: StoreLockTimeout})
		if errors.Is(err, boltstore.ErrLocked) {
			return nil, err // it names the file and the pid holding it
		}
		if err != nil {
			return nil, fmt.Errorf("open bolt store %s: %w", spec.Path, err)
		}
		return s, nil
	case BackendMongo:
		return openMongo(ctx, spec, clock)
	}
	return nil, fmt.Errorf("%w: store.backend %q is not a built-in store", ErrConfig, spec.Backend)
}

// errStoppedStarting: the agent was told to stop (SIGTERM) while it waited
// for its store. That is the stop asked for, not a failure: Run returns nil.
var errStoppedStarting = errors.New("stopped before serving")

// storeRetryMax caps the wait between attempts to reach a network store.
const storeRetryMax = 30 * time.Second

// openStoreRetrying opens the store. A MongoDB store that cannot be reached
// is retried with backoff until ctx ends, each failure logged, and the agent
// serves nothing meanwhile: it never grants a claim it cannot fence. Other
// stores fail at once — a locked or newer bbolt file, a bad plugin binary or
// a config error does not heal by waiting, and a supervisor (systemd's
// Restart=) is the right place to retry those.
func (a *Agent) openStoreRetrying(ctx context.Context, cfg Config) error {
	wait := time.Second
	for attempt := 1; ; attempt++ {
		err := a.openStore(ctx, cfg)
		if err != nil && ctx.Err() != nil {
			a.log.Info("stopped while opening the store, before serving", "err", err)
			return errStoppedStarting
		}
		if err == nil || cfg.Store.Backend != BackendMongo || errors.Is(err, ErrConfig) || errors.Is(err, ErrNoSocketDir) {
			return err
		}
		a.log.Error("store unreachable: not serving until it answers", "store", cfg.Store,
			"attempt", attempt, "retry_in", wait, "err", err)
		select {
		case <-ctx.Done():
			a.log.Info("stopped while waiting for the store, before serving", "attempts", attempt)
			return errStoppedStarting
		case <-time.After(wait):
		}
		wait = min(2*wait, storeRetryMax)
	}
}

// openStore opens the configured store. A plugin binary named by
// store.backend is launched as a go-plugin plugin; so are the built-in
// stores when the agent knows how to re-execute itself (Options.
// PluginCommand), which keeps a store crash out of the agent's process and
// lets the supervisor restart it. Otherwise the built-in store opens
// in-process.
func (a *Agent) openStore(ctx context.Context, cfg Config) error {
	if cfg.Store.Backend == BackendBolt {
		a.noteBoltLock(cfg.Store.Path)
	}
	argv := a.opts.PluginCommand
	if cfg.Store.IsPlugin() {
		argv = []string{cfg.Store.Backend}
	}
	if len(argv) > 0 {
		return a.launchPlugin(ctx, cfg, argv)
	}
	s, err := OpenBuiltinStore(ctx, cfg.StoreSpec(), a.clock)
	if err != nil {
		return err
	}
	a.store = s
	a.closeFn = s.Close
	a.backend = apitype.Backend{Name: cfg.Store.Backend, Path: cfg.BoardFile()}
	return nil
}

func (a *Agent) launchPlugin(ctx context.Context, cfg Config, argv []string) error {
	if cfg.Store.Backend == BackendBolt {
		// The child opens the file; create its directory here so a
		// permission problem is reported by the agent, not a plugin log.
		if err := os.MkdirAll(filepath.Dir(cfg.Store.Path), 0o750); err != nil {
			return fmt.Errorf("store.path: %w", err)
		}
	}
	sockDir, err := pluginSocketDir(cfg, a.log)
	if err != nil {
		return err
	}
	proxy, err := plugins.Launch(ctx, plugins.LaunchConfig{
		Cmd:       func() *exec.Cmd { return exec.Command(argv[0], argv[1:]...) },
		SocketDir: sockDir,
		Child:     new(cfg.StoreSpec()),
		Logger:    a.log.With("component", "store-plugin"),
	})
	if err != nil {
		var d interface{ Detail() string }
		if errors.As(err, &d) && d.Detail() != err.Error() {
			// The error is the plugin's own account of why it gave up,
			// and names the plugin; go-plugin's framing is detail.
			a.log.Debug("store plugin start failed", "detail", d.Detail())
			return err
		}
		return fmt.Errorf("store plugin %s: %w", argv[0], err)
	}
	a.store = proxy
	a.closeFn = proxy.Close
	a.backend = apitype.Backend{Name: cfg.Store.Backend, Plugin: argv[0], Path: cfg.BoardFile()}
	return nil
}

// noteBoltLock says at once, before the store waits up to
// StoreLockTimeout for it, that another process holds the bbolt file: a
// second agent on the file would otherwise sit silent until it gives up
// (DESIGN.md#bolt-lock).
func (a *Agent) noteBoltLock(path string) {
	locked, pids := boltstore.LockedBy(path)
	if !locked {
		return
	}
	holder := "another process"
	if len(pids) > 0 {
		holder = "pid " + strconv.Itoa(pids[0])
		for _, p := range pids[1:] {
			holder += ", pid " + strconv.Itoa(p)
		}
	}
	a.log.Warn(fmt.Sprintf("board file %s is locked by another process (%s): waiting up to %s for it", path, holder, StoreLockTimeout),
		"board_file", path, "holder", holder, "wait", StoreLockTimeout)
}

// ErrNoSocketDir: no directory the agent may write holds the store
// plugin's Unix socket. Waiting does not cure it, so it is not retried.
var ErrNoSocketDir = errors.New("no writable directory for the store plugin's socket")

// maxSocketDirLen is the longest directory the plugin's socket can live
// under: a Unix socket path has at most 107 bytes, and go-plugin adds
// "/plugin-dir" and "/plugin", each with up to ten random digits.
const maxSocketDirLen = 107 - len("/plugin-dir") - len("/plugin") - 2*10

// pluginSocketDir picks the directory under which the store plugin's
// socket is made: the temporary directory (TMPDIR, else /tmp) when the
// agent can write there, or else, for bbolt, the directory of the store
// file, which the agent must be able to write anyway and which is its own.
// A scratch or distroless image with a read-only root has no writable /tmp
// unless one is mounted; with the fallback a bbolt agent needs none. Other
// stores have no such directory: the one the agent's own socket lives in
// is shared with the workers (a socket volume), and the plugin's socket
// there would hand any worker running as root, or as the agent's uid, the
// store's verbs unfenced. When no directory serves, the error names them
// and why.
func pluginSocketDir(cfg Config, log *slog.Logger) (string, error) {
	tmp := os.TempDir()
	tmpErr := probeSocketDir(tmp)
	if tmpErr == nil {
		return tmp, nil
	}
	if cfg.Store.Backend != BackendBolt {
		return "", fmt.Errorf("%w: %v: mount a writable /tmp (a tmpfs) or set TMPDIR to a writable directory of the agent's own",
			ErrNoSocketDir, tmpErr)
	}
	state := filepath.Dir(cfg.Store.Path)
	stateErr := probeSocketDir(state)
	if stateErr != nil {
		return "", fmt.Errorf("%w: %v; %v: mount a writable /tmp (a tmpfs) or set TMPDIR to a writable directory",
			ErrNoSocketDir, tmpErr, stateErr)
	}
	log.Info("the temporary directory is not writable: the store plugin's socket lives in the state directory",
		"dir", state, "tmp_err", tmpErr)
	return state, nil
}

// probeSocketDir checks that dir can hold go-plugin's socket directory, by
// making (and removing) a directory there as go-plugin will.
func probeSocketDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("%s: %v", dir, err)
	}
	if len(abs) > maxSocketDirLen {
		return fmt.Errorf("%s: too long for a Unix socket path under it (%d bytes, at most %d)", abs, len(abs), maxSocketDirLen)
	}
	d, err := os.MkdirTemp(abs, ".leasekeeper-probe-")
	if err != nil {
		return err // *PathError: names the directory and the cause
	}
	return os.Remove(d)
}
