package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// ReloadResult reports one reload attempt of the config watcher.
type ReloadResult struct {
	// Config is the configuration in force after the attempt: the new one
	// when it was applied, the last good one otherwise.
	Config Config
	// Err is why the file was refused (the last good config stays).
	Err error
	// Restart lists changed keys that need an agent restart to apply.
	Restart []string
}

// ErrConfigRemoved is the reload result of a config file that is gone: the
// last good config stays in force until the file comes back.
var ErrConfigRemoved = errors.New("config file removed")

// WatchConfig watches the config file at path and applies every valid
// change to live until ctx ends. An invalid or empty file keeps the last
// good config and is logged with the reason; a removed one is logged at
// warn and keeps it too.
//
// It watches the file's DIRECTORY and filters by name, because editors and
// Kubernetes ConfigMaps replace the file by rename (a ConfigMap swaps a
// "..data" symlink): a watch on the file itself would follow the old inode
// and miss every later change.
//
// onReload, when set, is called after every attempt (tests and status use
// it); it runs on the watcher's goroutine.
//
// When path is a symlink to a file in another directory, that directory is
// watched as well (and the link re-resolved after every event), so an edit
// of the target is seen.
func WatchConfig(ctx context.Context, path string, env Environment, live *Live, log *slog.Logger, onReload func(ReloadResult)) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("config watcher: %w", err)
	}
	dir, base := filepath.Dir(abs), filepath.Base(abs)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config watcher: %w", err)
	}
	if err := w.Add(dir); err != nil {
		_ = w.Close()
		return fmt.Errorf("config watcher: watch %s: %w", dir, err)
	}
	go func() {
		defer w.Close()
		watchLoop(ctx, w, abs, base, env, live, log, onReload)
	}()
	return nil
}

// settle coalesces the burst of events one save produces (write, chmod,
// rename...) into one reload. It is a scheduling delay only; correctness
// does not depend on it because an unchanged file is never re-applied.
const settle = 100 * time.Millisecond

func watchLoop(ctx context.Context, w *fsnotify.Watcher, path, base string, env Environment, live *Live, log *slog.Logger, onReload func(ReloadResult)) {
	// Compare against the content the config in force was parsed from, and
	// check once right away: a change made between the agent's first load
	// and the watch being set up would otherwise go unseen until the next
	// one. That first check settles like any other, so a write in progress
	// (truncated, not yet rewritten) is not read half-way.
	last := live.Config().raw
	timer := time.NewTimer(settle)
	defer timer.Stop()
	// The symlink's target, when it lives in another directory: watched
	// too, and followed when the link is re-pointed.
	var targetDir, targetBase string
	follow := func() {
		real, err := filepath.EvalSymlinks(path)
		if err != nil || filepath.Dir(real) == filepath.Dir(path) {
			return
		}
		dir := filepath.Dir(real)
		if dir != targetDir {
			if err := w.Add(dir); err != nil {
				log.Warn("config watcher: cannot watch the symlink's target directory; edits of the target may go unseen", "dir", dir, "err", err)
				return
			}
			if targetDir != "" {
				_ = w.Remove(targetDir)
			}
		}
		targetDir, targetBase = dir, filepath.Base(real)
	}
	follow()
	removed := false
	var pending []byte // the content read at the last settle, not yet applied
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			log.Warn("config watcher error", "err", err)
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			name, dir := filepath.Base(ev.Name), filepath.Dir(ev.Name)
			inTarget := targetDir != "" && dir == targetDir && name == targetBase
			// "..data" and friends are the ConfigMap's atomic swap.
			if !inTarget && dir == filepath.Dir(path) && name != base && !strings.HasPrefix(name, "..") {
				continue
			}
			if !inTarget && dir != filepath.Dir(path) {
				continue
			}
			timer.Reset(settle)
		case <-timer.C:
			follow()
			data, err := os.ReadFile(path)
			if errors.Is(err, os.ErrNotExist) {
				// Settled and still absent: not a rename in progress (its
				// create event would have come within the settle delay).
				if !removed {
					removed = true
					log.Warn("config file removed: keeping the last good config until it comes back", "path", path)
					if onReload != nil {
						onReload(ReloadResult{Config: live.Config(), Err: fmt.Errorf("%s: %w", path, ErrConfigRemoved)})
					}
				}
				continue
			}
			removed = false
			if err == nil && bytes.Equal(data, last) {
				pending = nil
				continue
			}
			// Apply a content only once it has read the same twice, a
			// settle apart: a file written in place (truncated, then
			// written) is otherwise read half-way — an empty file, or a
			// valid prefix that silently drops the keys after it. A file
			// replaced by rename, as editors and ConfigMaps do, is whole at
			// once and merely waits one settle more.
			if err == nil && !bytes.Equal(data, pending) {
				pending = data
				timer.Reset(settle)
				continue
			}
			pending = nil
			res := reload(path, data, err, env, live, log)
			if res.Err == nil {
				last = data
			}
			if onReload != nil {
				onReload(res)
			}
		}
	}
}

func reload(path string, data []byte, readErr error, env Environment, live *Live, log *slog.Logger) ReloadResult {
	next, err := parseFile(data, env)
	if readErr != nil {
		err = readErr
	}
	if err != nil {
		log.Error("config reload refused: keeping the last good config", "path", path, "err", err)
		return ReloadResult{Config: live.Config(), Err: err}
	}
	restart := live.Apply(next)
	for _, w := range next.Warnings {
		log.Warn(w)
	}
	log.Info("config reloaded", "path", path,
		"lease", next.Lease, "reaper_enabled", next.Reaper.Enabled,
		"liveness", next.Liveness, "log", next.LogLevel.String())
	if len(restart) > 0 {
		log.Warn("config keys changed that only apply after a restart", "keys", restart)
	}
	return ReloadResult{Config: next, Restart: restart}
}
