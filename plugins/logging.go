package plugins

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// hclogFor adapts the agent's slog.Logger for go-plugin, which logs through
// hclog (its own lines and the plugin's stderr, relayed at each line's
// level). hclog writes JSON lines to slogWriter, which re-emits each as one
// slog record.
//
// The context.Background() calls here only satisfy slog's signatures: a
// relayed log line belongs to no request, and no store call goes through
// this file.
func hclogFor(l *slog.Logger) hclog.Logger {
	level := hclog.Info
	if l.Enabled(context.Background(), slog.LevelDebug) {
		level = hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       hclogName,
		Level:      level,
		Output:     &slogWriter{l: l},
		JSONFormat: true,
	})
}

// hclogName names go-plugin's logger in the agent.
const hclogName = "store-plugin"

type slogWriter struct {
	l *slog.Logger
}

func (w *slogWriter) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		w.emit(bytes.TrimSpace(line))
	}
	return len(p), nil
}

func (w *slogWriter) emit(line []byte) {
	if len(line) == 0 {
		return
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		w.l.Info(string(line))
		return
	}
	msg, _ := m["@message"].(string)
	lvl := slog.LevelInfo
	switch lv, _ := m["@level"].(string); strings.ToLower(lv) {
	case "trace", "debug":
		lvl = slog.LevelDebug
	case "warn":
		lvl = slog.LevelWarn
	case "error":
		lvl = slog.LevelError
	}
	// go-plugin's own lines (module "store-plugin"; the plugin's relayed
	// lines are "store-plugin.<binary>") tell of the process starting and
	// exiting, which the proxy reports itself, in terms of the store: they
	// are detail.
	if mod, _ := m["@module"].(string); mod == hclogName && lvl > slog.LevelDebug {
		lvl = slog.LevelDebug
	}
	var attrs []any
	if mod, ok := m["@module"].(string); ok {
		attrs = append(attrs, slog.String("module", mod))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		if !strings.HasPrefix(k, "@") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, m[k]))
	}
	w.l.Log(context.Background(), lvl, msg, attrs...)
}

// tailBuffer keeps the last bytes of a plugin's stderr, so a start failure
// can quote why the plugin died.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = slices.Clone(t.buf[over:])
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
