package agent

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/storespec"
)

func testEnv(vars map[string]string) Environment {
	return Environment{
		LookupEnv: func(k string) (string, bool) {
			v, ok := vars[k]
			return v, ok
		},
		UID:     1000,
		WorkDir: "/srv/work",
	}
}

func TestConfigDefaultsWithNoFile(t *testing.T) {
	t.Parallel()
	// The socket lives in the runtime directory (a tmpfs, right for a
	// socket); the board lives in persistent state (DESIGN.md#board-on-disk).
	cases := []struct {
		name       string
		env        map[string]string
		root       bool
		wantSocket string
		wantPath   string
	}{
		{
			name:       "xdg runtime and state dirs set",
			env:        map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000", "XDG_STATE_HOME": "/home/u/state", "HOME": "/home/u"},
			wantSocket: "/run/user/1000/leasekeeper/leasekeeper.sock",
			wantPath:   "/home/u/state/leasekeeper/leasekeeper.db",
		},
		{
			name:       "no xdg state home: the specification's default under HOME",
			env:        map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000", "HOME": "/home/u"},
			wantSocket: "/run/user/1000/leasekeeper/leasekeeper.sock",
			wantPath:   "/home/u/.local/state/leasekeeper/leasekeeper.db",
		},
		{
			name:       "a relative xdg state home is ignored, as the specification says",
			env:        map[string]string{"XDG_STATE_HOME": "state", "HOME": "/home/u"},
			wantSocket: "/srv/work/leasekeeper.sock",
			wantPath:   "/home/u/.local/state/leasekeeper/leasekeeper.db",
		},
		{
			name:       "neither xdg dir nor HOME: the working directory",
			env:        map[string]string{},
			wantSocket: "/srv/work/leasekeeper.sock",
			wantPath:   "/srv/work/leasekeeper.db",
		},
		{
			name: "root under the system unit: its RuntimeDirectory and StateDirectory",
			env: map[string]string{"RUNTIME_DIRECTORY": "/run/leasekeeper", "STATE_DIRECTORY": "/var/lib/leasekeeper",
				"HOME": "/root", "XDG_STATE_HOME": "/root/.local/state", "XDG_RUNTIME_DIR": "/run/user/0"},
			root:       true,
			wantSocket: "/run/leasekeeper/leasekeeper.sock",
			wantPath:   "/var/lib/leasekeeper/leasekeeper.db",
		},
		{
			name:       "root outside systemd: HOME like anyone",
			env:        map[string]string{"HOME": "/root"},
			root:       true,
			wantSocket: "/srv/work/leasekeeper.sock",
			wantPath:   "/root/.local/state/leasekeeper/leasekeeper.db",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := testEnv(tc.env)
			wantOperators := []uint32{0, 1000}
			if tc.root {
				env.UID, wantOperators = 0, []uint32{0}
			}
			cfg, err := LoadConfig("", env)
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			if got, want := cfg.Socket, tc.wantSocket; got != want {
				t.Errorf("socket = %q, want %q", got, want)
			}
			if got, want := cfg.Store, (storespec.Spec{Backend: BackendBolt, Path: tc.wantPath}); !got.Equal(want) {
				t.Errorf("store = %+v, want %+v", got, want)
			}
			if got, want := cfg.Lease, 30*time.Second; got != want {
				t.Errorf("lease = %s, want %s", got, want)
			}
			if got, want := cfg.HeartbeatInterval(), 10*time.Second; got != want {
				t.Errorf("heartbeat = %s, want %s", got, want)
			}
			if got, want := cfg.OrphanGrace, 10*time.Second; got != want {
				t.Errorf("orphan_grace = %s, want %s", got, want)
			}
			// The gate is on out of the box: a new install has no older
			// binary that could strip a lease (DESIGN.md#gate).
			if got, want := cfg.Reaper, (ReaperConfig{Enabled: true, Interval: time.Minute, Batch: 100}); got != want {
				t.Errorf("reaper = %+v, want %+v", got, want)
			}
			if got, want := cfg.UnleasedHorizon, 24*time.Hour; got != want {
				t.Errorf("unleased_horizon = %s, want %s", got, want)
			}
			if got, want := cfg.Liveness, LivenessPID; got != want {
				t.Errorf("liveness = %q, want %q", got, want)
			}
			if got, want := cfg.Operators, wantOperators; !slices.Equal(got, want) {
				t.Errorf("operators = %v, want %v", got, want)
			}
			if cfg.AllowTmpfs {
				t.Error("store.allow_tmpfs is on by default")
			}
			if got, want := cfg.LogLevel, slog.LevelInfo; got != want {
				t.Errorf("log = %v, want %v", got, want)
			}
			// The embedded default board: in_progress is also a pool state
			// on the local twin (DESIGN.md#twin-repark).
			if got, want := cfg.Board.String(), board.DefaultBoard(true).String(); got != want {
				t.Errorf("board = %s, want %s", got, want)
			}
		})
	}
}

func TestDefaultSocketAgreesWithClients(t *testing.T) {
	// Not parallel: it reads the real environment, which t.Setenv changes.
	for _, xdg := range []string{"", t.TempDir()} {
		t.Setenv("XDG_RUNTIME_DIR", xdg)
		if got, want := DefaultEnvironment().DefaultSocketPath(), apitype.DefaultSocketPath(); got != want {
			t.Errorf("XDG_RUNTIME_DIR=%q: agent socket %q, client default %q", xdg, got, want)
		}
	}
}

func TestConfigParsesEveryKey(t *testing.T) {
	t.Parallel()
	doc := `
socket: /tmp/lk/agent.sock
store:
  backend: mongo
  uri: mongodb://db.example:27017
  database: fleet
board: builds
states:
  - {name: todo, pool: true, launch: true}
  - {name: doing, running: true}
  - {name: shipped, terminal: true, completion: true}
  - {name: failed, terminal: true}
retry: {max_attempts: 5, backoff: 30s, backoff_max: 1h}
lease: 45s
liveness: keepalive
reaper:
  enabled: true
  interval: 2m
  batch: 7
retention:
  age: 168h
  per_pass: 50
  interval: 5m
unleased_horizon: 48h
orphan_grace: 20s
operators: [0, 42, 42]
metrics: 127.0.0.1:9100
log: debug
`
	cfg, err := ParseConfig([]byte(doc), testEnv(nil))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	want := Config{
		Socket:          "/tmp/lk/agent.sock",
		Store:           storespec.Spec{Backend: BackendMongo, URI: "mongodb://db.example:27017", Database: "fleet"},
		BoardName:       "builds",
		Lease:           45 * time.Second,
		Liveness:        LivenessKeepalive,
		Reaper:          ReaperConfig{Enabled: true, Interval: 2 * time.Minute, Batch: 7},
		Retention:       RetentionConfig{Age: 168 * time.Hour, PerPass: 50, Interval: 5 * time.Minute},
		UnleasedHorizon: 48 * time.Hour,
		OrphanGrace:     20 * time.Second,
		Operators:       []uint32{0, 42},
		Metrics:         "127.0.0.1:9100",
		LogLevel:        slog.LevelDebug,
	}
	if got := cfg.Socket; got != want.Socket {
		t.Errorf("socket = %q, want %q", got, want.Socket)
	}
	if !cfg.Store.Equal(want.Store) {
		t.Errorf("store = %+v, want %+v", cfg.Store, want.Store)
	}
	if cfg.BoardName != want.BoardName || cfg.Lease != want.Lease || cfg.Liveness != want.Liveness ||
		cfg.Reaper != want.Reaper || cfg.UnleasedHorizon != want.UnleasedHorizon || cfg.OrphanGrace != want.OrphanGrace ||
		cfg.Metrics != want.Metrics || cfg.LogLevel != want.LogLevel {
		t.Errorf("config = %+v, want %+v", cfg, want)
	}
	if !slices.Equal(cfg.Operators, want.Operators) {
		t.Errorf("operators = %v, want %v", cfg.Operators, want.Operators)
	}
	if got, want := cfg.Board.String(), "todo[pool launch] doing[running] shipped[terminal completion] failed[terminal] retry{max_attempts 5, backoff 30s, backoff_max 1h0m0s}"; got != want {
		t.Errorf("board = %s, want %s", got, want)
	}
	if got, want := cfg.Board.Retry, (board.RetryPolicy{MaxAttempts: 5, Backoff: 30 * time.Second, BackoffMax: time.Hour}); got != want {
		t.Errorf("retry = %+v, want %+v", got, want)
	}
}

func TestConfigMongoDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig([]byte("store: {backend: mongo}\n"), testEnv(nil))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if got, want := cfg.Store, (storespec.Spec{Backend: BackendMongo, URI: DefaultMongoURI, Database: DefaultBoardName}); !got.Equal(want) {
		t.Errorf("store = %+v, want %+v", got, want)
	}
	// The fleet board returns cards to ready through a repark, so its
	// running column is not a pool state.
	if got, want := cfg.Board.String(), board.DefaultBoard(false).String(); got != want {
		t.Errorf("board = %s, want %s", got, want)
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		doc  string
		want []string // substrings of the error
	}{
		{"unknown top-level key with its line", "lease: 30s\nleese: 10s\n", []string{"line 2", `unknown key "leese"`}},
		{"unknown nested key", "store:\n  backend: bolt\n  pathh: /x\n", []string{"line 3", `unknown key "store.pathh"`}},
		{"unknown reaper key", "reaper:\n  enable: true\n", []string{"line 2", `unknown key "reaper.enable"`}},
		{"unknown state flag", "states:\n  - {name: a, pool: true, poool: true}\n", []string{"line 2", `unknown key "states[].poool"`}},
		{"bare number lease", "lease: 30\n", []string{"line 1", "not a duration"}},
		{"garbage duration", "reaper:\n  interval: soon\n", []string{"line 2", `"soon" is not a duration`}},
		{"lease too short", "lease: 1s\n", []string{"lease:", "too short"}},
		{"horizon below one lease", "lease: 1m\nunleased_horizon: 30s\n", []string{"unleased_horizon:", "below one lease"}},
		{"bad liveness", "liveness: ping\n", []string{"liveness:", `"ping"`}},
		{"bad batch", "reaper: {batch: 0}\n", []string{"reaper.batch:"}},
		{"bad log level", "log: loud\n", []string{"log:", `"loud"`}},
		{"bad metrics address", "metrics: nowhere\n", []string{"metrics:"}},
		{"missing plugin binary", "store: {backend: /nonexistent/lk-plugin}\n", []string{"store.backend:", "plugin binary"}},
		{"mongo keys on bolt", "store: {uri: mongodb://x}\n", []string{"store.uri:"}},
		{"allow_tmpfs on mongo", "store: {backend: mongo, allow_tmpfs: true}\n", []string{"store.allow_tmpfs:", "bbolt file"}},
		{"invalid board states", "states:\n  - {name: a, pool: true}\n", []string{"states:", "running"}},
		{"negative orphan grace", "orphan_grace: -1s\n", []string{"orphan_grace:"}},
		{"retry max_attempts zero", "retry: {max_attempts: 0}\n", []string{"retry.max_attempts:"}},
		{"retry backoff not a duration", "retry:\n  backoff: 10\n", []string{"line 2", "not a duration"}},
		{"retry backoff above its maximum", "retry: {backoff: 1h, backoff_max: 1m}\n", []string{"retry:", "above backoff_max"}},
		{"unknown retry key", "retry:\n  attempts: 3\n", []string{"line 2", `unknown key "retry.attempts"`}},
		{"operators not uids", "operators: [root]\n", []string{"line 1"}},
		// A user name is not a uid: said so, with the uid of the user
		// named when there is one.
		{"operators a user name", "operators: root\n", []string{"line 1", "operators:", `"root"`, "numeric uids, not user names", "root is uid 0", "operators: [0]"}},
		{"operators a list with a user name", "lease: 30s\noperators: [0, root]\n", []string{"line 2", "operators:", `"root"`, "numeric uids, not user names", "root is uid 0"}},
		{"operators a block list with a user name", "operators:\n  - 0\n  - root\n", []string{"line 3", "operators:", "numeric uids, not user names", "root is uid 0"}},
		{"operators an unknown user name", "operators: [lk-no-such-user]\n", []string{"line 1", "operators:", `"lk-no-such-user"`, "numeric uids, not user names"}},
		{"operators a negative uid", "operators: [-1]\n", []string{"line 1", "operators:", `"-1"`, "numeric uid"}},
		{"operators one bare uid", "operators: 1001\n", []string{"line 1", "operators:", "a list", "[1001]"}},
		{"two documents", "lease: 30s\n---\nlease: 40s\n", []string{"second YAML document"}},
		{"not a mapping", "- a\n- b\n", []string{"line 1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseConfig([]byte(tc.doc), testEnv(nil))
			if err == nil {
				t.Fatalf("ParseConfig(%q) = nil error, want one containing %q", tc.doc, tc.want)
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("error %v does not wrap ErrConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestConfigReaperEnvOverride(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		file        string
		env         string
		wantOn      bool
		wantWarning bool
	}{
		{"unset and no file: on by default", "", "-", true, false},
		{"unset keeps the file off", "reaper: {enabled: false}\n", "-", false, false},
		{"unset keeps the file on", "reaper: {enabled: true}\n", "-", true, false},
		{"env off is the kill switch over the default", "", "0", false, false},
		{"empty is off", "reaper: {enabled: true}\n", "", false, false},
		{"env on beats file off", "reaper: {enabled: false}\n", "1", true, false},
		{"env off beats file on", "reaper: {enabled: true}\n", "off", false, false},
		{"env yes", "", "yes", true, false},
		{"invalid env is off with a warning", "reaper: {enabled: true}\n", "maybe", false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			vars := map[string]string{ReaperEnv: tc.env}
			if tc.env == "-" {
				vars = nil
			}
			cfg, err := ParseConfig([]byte(tc.file), testEnv(vars))
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			if got, want := cfg.Reaper.Enabled, tc.wantOn; got != want {
				t.Errorf("reaper.enabled = %v, want %v", got, want)
			}
			if got, want := len(cfg.Warnings), map[bool]int{false: 0, true: 1}[tc.wantWarning]; got != want {
				t.Errorf("warnings = %q, want %d", cfg.Warnings, want)
			}
		})
	}
}

func TestLoadConfigFileErrorsNameThePath(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, []byte("bogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(path, testEnv(nil))
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `unknown key "bogus"`) {
		t.Fatalf("LoadConfig error = %v, want the path and the unknown key", err)
	}
	if _, err := LoadConfig(filepath.Join(t.TempDir(), "missing.yaml"), testEnv(nil)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadConfig(missing) = %v, want os.ErrNotExist", err)
	}
}

func TestReloadableDiff(t *testing.T) {
	t.Parallel()
	base, err := ParseConfig(nil, testEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		doc  string
		want []string
	}{
		{"live keys only", "lease: 45s\nreaper: {enabled: true}\nlog: debug\nliveness: keepalive\norphan_grace: 10s\n", nil},
		{"socket and store", "socket: /elsewhere.sock\nstore: {path: /elsewhere.db}\n", []string{"socket", "store"}},
		{"allow_tmpfs is read at start", "store: {allow_tmpfs: true}\n", []string{"store"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			next, err := ParseConfig([]byte(tc.doc), testEnv(nil))
			if err != nil {
				t.Fatal(err)
			}
			if got := ReloadableDiff(base, next); !slices.Equal(got, tc.want) {
				t.Errorf("ReloadableDiff = %q, want %q", got, tc.want)
			}
		})
	}
}

// Retention is on by default (DESIGN.md#retention), age 0 turns it off,
// and the strict loader refuses what a pruner cannot run with.
func TestConfigRetention(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig(nil, testEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := (RetentionConfig{Age: DefaultRetentionAge, PerPass: DefaultRetentionPerPass, Interval: DefaultRetentionInterval}); cfg.Retention != want || !cfg.Retention.Enabled() {
		t.Errorf("default retention = %+v, want %+v, enabled", cfg.Retention, want)
	}
	off, err := ParseConfig([]byte("retention: {age: 0s}\n"), testEnv(nil))
	if err != nil || off.Retention.Enabled() || !strings.Contains(off.Retention.String(), "off") {
		t.Errorf("retention.age 0 = %+v, %v; want it off", off.Retention, err)
	}
	for doc, key := range map[string]string{
		"retention: {age: -1h}\n":        "retention.age",
		"retention: {age: 10m}\n":        "retention.age",
		"retention: {per_pass: 0}\n":     "retention.per_pass",
		"retention: {per_pass: 20000}\n": "retention.per_pass",
		"retention: {interval: 1s}\n":    "retention.interval",
		"retention: {every: 1m}\n":       "retention.every",
	} {
		if _, err := ParseConfig([]byte(doc), testEnv(nil)); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), key) {
			t.Errorf("%q: err = %v, want ErrConfig naming %s", doc, err, key)
		}
	}
}
