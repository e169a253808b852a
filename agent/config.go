package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/storespec"
	"github.com/leasekeeper/leasekeeper/watchdog"
)

// Store backends the agent knows by name. Any other value of store.backend
// is the path of a plugin binary.
const (
	BackendBolt  = storespec.Bolt
	BackendMongo = storespec.Mongo
)

// Liveness modes (DESIGN.md#liveness).
const (
	LivenessPID       = "pid"
	LivenessKeepalive = "keepalive"
)

// ReaperEnv overrides reaper.enabled when set (DESIGN.md#gate: the operator's
// kill switch for the watchdog's decisions, which are on by default).
const ReaperEnv = watchdog.GateEnv

// Defaults of the keys that have one.
const (
	// DefaultReaperEnabled: the gate is on out of the box. A new install
	// has no older binary that could strip a lease, and with the gate off
	// a dead worker's card would stay claimed for ever; the gate stays the
	// operator's kill switch, and a fleet upgrading from binaries that
	// predate leases turns it off for the mixed window (DESIGN.md#gate,
	// DESIGN.md#release-n).
	DefaultReaperEnabled   = true
	DefaultBoardName       = "leasekeeper"
	DefaultLease           = 30 * time.Second
	DefaultReaperInterval  = 60 * time.Second
	DefaultReaperBatch     = 100
	DefaultUnleasedHorizon = 24 * time.Hour
	DefaultLogLevel        = "info"
	DefaultMongoURI        = "mongodb://127.0.0.1:27017"

	// DefaultRetentionAge: retention is on out of the box, keeping 30
	// days. A board whose history only grows fills its disk, and a full
	// disk stops every write, fences included (DESIGN.md#wal-recovery);
	// 30 days is past any investigation of a finished card, and the agent
	// says the policy once at start, so nothing goes unannounced
	// (DESIGN.md#retention).
	DefaultRetentionAge      = 720 * time.Hour
	DefaultRetentionPerPass  = 500
	DefaultRetentionInterval = 10 * time.Minute
)

// ErrConfig marks every configuration error, so callers can tell a bad file
// from an I/O failure with errors.Is.
var ErrConfig = errors.New("invalid config")

// Config is the agent's validated configuration. Every field is filled: the
// zero file (or no file at all) yields a working embedded agent.
type Config struct {
	// Socket is the Unix socket the agent serves workers and operators on.
	Socket string
	// Store selects and addresses the storage backend: the store.* keys.
	// Its Board, Lease and UnleasedHorizon are zero; StoreSpec fills them
	// from the keys of their own.
	Store storespec.Spec
	// AllowTmpfs (store.allow_tmpfs) lets a bbolt file live on a tmpfs or
	// a ramfs, which the agent otherwise refuses at start
	// (DESIGN.md#board-on-disk): for tests and boards meant to be lost.
	AllowTmpfs bool
	// BoardName names the board; it picks the default bbolt file and the
	// default MongoDB database.
	BoardName string
	// Board is the ordered set of states.
	Board board.Board
	// Lease is the claim TTL; the heartbeat renews every Lease/3.
	Lease time.Duration
	// Liveness is LivenessPID or LivenessKeepalive.
	Liveness string
	Reaper   ReaperConfig
	// Retention is the retention.* block (DESIGN.md#retention).
	Retention RetentionConfig
	// UnleasedHorizon is how old an un-leased claim must be before the fleet
	// twin lists it (DESIGN.md#unleased-sweep).
	UnleasedHorizon time.Duration
	// OrphanGrace is how long past its lease an owner must be silent before
	// the liveness oracle may call its run orphaned.
	OrphanGrace time.Duration
	// Operators are the uids allowed operator verbs.
	Operators []uint32
	// Metrics is an optional TCP address for the Prometheus endpoint.
	Metrics string
	// LogLevel is the slog level.
	LogLevel slog.Level

	// Warnings are non-fatal remarks made while loading (an invalid
	// LEASEKEEPER_REAPER value, for one); the agent logs each once.
	Warnings []string

	// raw is the file content this config was parsed from, so the config
	// watcher can tell a real change from a touch.
	raw []byte
}

// ReaperConfig is the reaper.* block.
type ReaperConfig struct {
	Enabled  bool
	Interval time.Duration
	Batch    int
}

// RetentionConfig is the retention.* block: what the background pruner
// deletes and how fast (DESIGN.md#retention).
type RetentionConfig struct {
	// Age: runs of finished cards and events older than it are pruned; 0
	// keeps everything (the pruner does not run).
	Age time.Duration
	// PerPass bounds the runs and, separately, the events of one pass.
	PerPass int
	// Interval is the time between passes.
	Interval time.Duration
}

// Enabled reports whether the pruner runs.
func (r RetentionConfig) Enabled() bool { return r.Age > 0 }

// String is the policy as the agent logs it at start.
func (r RetentionConfig) String() string {
	if !r.Enabled() {
		return "off (retention.age: 0): runs and events are kept for ever"
	}
	return fmt.Sprintf("runs of finished cards and events older than %s are deleted, at most %d of each every %s", r.Age, r.PerPass, r.Interval)
}

// HeartbeatInterval is the renewal cadence: a third of the lease (DESIGN.md#heartbeat).
func (c Config) HeartbeatInterval() time.Duration { return c.Lease / 3 }

// StoreSpec is the spec the agent opens its store with: the store.* keys
// with the board, the lease and the unleased horizon.
func (c Config) StoreSpec() storespec.Spec {
	return c.Store.With(c.Board, c.Lease, c.UnleasedHorizon)
}

// The file* types mirror the YAML document. Pointers tell "absent" from
// "zero" so defaults apply only to keys the file leaves out.
type fileConfig struct {
	Socket          *string        `yaml:"socket"`
	Store           *fileStore     `yaml:"store"`
	Board           *string        `yaml:"board"`
	States          []board.State  `yaml:"states"`
	Retry           *fileRetry     `yaml:"retry"`
	Lease           *duration      `yaml:"lease"`
	Liveness        *string        `yaml:"liveness"`
	Reaper          *fileReaper    `yaml:"reaper"`
	Retention       *fileRetention `yaml:"retention"`
	UnleasedHorizon *duration      `yaml:"unleased_horizon"`
	OrphanGrace     *duration      `yaml:"orphan_grace"`
	Operators       *uidList       `yaml:"operators"`
	Metrics         *string        `yaml:"metrics"`
	Log             *string        `yaml:"log"`
}

type fileStore struct {
	Backend    *string `yaml:"backend"`
	Path       *string `yaml:"path"`
	URI        *string `yaml:"uri"`
	Database   *string `yaml:"database"`
	AllowTmpfs *bool   `yaml:"allow_tmpfs"`
}

// fileRetry is the board's default retry policy (DESIGN.md#retries): it
// seeds a new store with the states.
type fileRetry struct {
	MaxAttempts *int      `yaml:"max_attempts"`
	Backoff     *duration `yaml:"backoff"`
	BackoffMax  *duration `yaml:"backoff_max"`
}

type fileReaper struct {
	Enabled  *bool     `yaml:"enabled"`
	Interval *duration `yaml:"interval"`
	Batch    *int      `yaml:"batch"`
}

type fileRetention struct {
	Age      *duration `yaml:"age"`
	PerPass  *int      `yaml:"per_pass"`
	Interval *duration `yaml:"interval"`
}

// duration decodes Go duration syntax ("30s", "2m") and nothing else: a bare
// number is refused because "30" could mean seconds or nanoseconds.
type duration struct {
	d    time.Duration
	line int
}

func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return fmt.Errorf("line %d: %q is not a duration: use Go syntax such as 30s or 2m", n.Line, n.Value)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration: use Go syntax such as 30s or 2m", n.Line, n.Value)
	}
	d.d, d.line = v, n.Line
	return nil
}

// uidList decodes a list of numeric uids (operators). A user name in it
// is refused saying that uids are numbers, with the uid the name has on
// this host when it has one: yaml.v3's own "cannot unmarshal !!str" says
// neither.
type uidList []uint32

func (u *uidList) UnmarshalYAML(n *yaml.Node) error {
	const key = "operators"
	if n.Kind == yaml.ScalarNode {
		if uid, ok := parseUID(n); ok {
			return fmt.Errorf("line %d: %s: want a list of numeric uids, such as [%d]", n.Line, key, uid)
		}
		if n.Tag == "!!str" {
			return fmt.Errorf("line %d: %s: %q is a user name; %s are numeric uids, not user names%s",
				n.Line, key, n.Value, key, uidHint(key, []*yaml.Node{n}))
		}
		return fmt.Errorf("line %d: %s: want a list of numeric uids, such as [0, 1001], got %q", n.Line, key, n.Value)
	}
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: %s: want a list of numeric uids, such as [0, 1001]", n.Line, key)
	}
	out := make(uidList, 0, len(n.Content))
	for _, item := range n.Content {
		uid, ok := parseUID(item)
		switch {
		case ok:
			out = append(out, uid)
		case item.Kind == yaml.ScalarNode && item.Tag == "!!str":
			return fmt.Errorf("line %d: %s: %q is a user name; %s are numeric uids, not user names%s",
				item.Line, key, item.Value, key, uidHint(key, n.Content))
		default:
			return fmt.Errorf("line %d: %s: %q is not a uid: want a numeric uid from 0 to %d", item.Line, key, item.Value, uint32(math.MaxUint32))
		}
	}
	*u = out
	return nil
}

// parseUID reads one uid: a number from 0 to 2^32-1, quoted or not.
func parseUID(n *yaml.Node) (uint32, bool) {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!str") {
		return 0, false
	}
	v, err := strconv.ParseUint(n.Value, 10, 32)
	return uint32(v), err == nil
}

// uidHint suggests the list with each user name replaced by its uid on
// this host, or "" when a name is not a user here.
func uidHint(key string, items []*yaml.Node) string {
	var names, uids []string
	for _, item := range items {
		if uid, ok := parseUID(item); ok {
			uids = append(uids, strconv.FormatUint(uint64(uid), 10))
			continue
		}
		u, err := user.Lookup(item.Value)
		if err != nil {
			return ""
		}
		names = append(names, fmt.Sprintf("%s is uid %s", u.Username, u.Uid))
		uids = append(uids, u.Uid)
	}
	return fmt.Sprintf(" (on this host %s: %s: [%s])", strings.Join(names, ", "), key, strings.Join(uids, ", "))
}

// Environment is what LoadConfig reads from the process: injected so tests
// can run in parallel without touching the real environment.
type Environment struct {
	// LookupEnv reads a variable (os.LookupEnv when nil).
	LookupEnv func(string) (string, bool)
	// UID is the agent's own uid.
	UID int
	// WorkDir is the directory used when XDG_RUNTIME_DIR is unset (for
	// the socket), and when neither XDG_STATE_HOME nor HOME is (for the
	// bbolt file); empty means the working directory, named relatively (as
	// apitype.DefaultSocketPath does, so agent and clients agree).
	WorkDir string
	// Socket, when set, is the socket whatever the config file says (the
	// agent's --socket flag).
	Socket string
}

// DefaultEnvironment reads the real process environment.
func DefaultEnvironment() Environment {
	return Environment{LookupEnv: os.LookupEnv, UID: os.Getuid()}
}

// RuntimeDir is where the agent keeps its socket by default outside
// systemd: $XDG_RUNTIME_DIR/leasekeeper when set, else the working
// directory. The runtime directory is a tmpfs emptied at logout and at
// reboot: right for a socket, wrong for the board (StateHome).
func (e Environment) RuntimeDir() string {
	if d := e.getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "leasekeeper")
	}
	return e.WorkDir
}

// systemdDir is the first directory of a systemd directory variable
// (RUNTIME_DIRECTORY, STATE_DIRECTORY, CONFIGURATION_DIRECTORY: systemd
// sets them, colon separated, for a unit's RuntimeDirectory= and the like),
// or "" when unset.
func (e Environment) systemdDir(name string) string {
	v, _, _ := strings.Cut(e.getenv(name), ":")
	return v
}

// agentSocketPath is the agent's default socket: in the unit's runtime
// directory under systemd, else DefaultSocketPath. Only the agent reads
// RUNTIME_DIRECTORY: a client run from a unit of its own would find that
// unit's directory there, not the agent's.
func (e Environment) agentSocketPath() string {
	if d := e.systemdDir("RUNTIME_DIRECTORY"); d != "" {
		return filepath.Join(d, "leasekeeper.sock")
	}
	return e.DefaultSocketPath()
}

// StateHome is where the agent keeps its bbolt file by default outside
// systemd: $XDG_STATE_HOME/leasekeeper when XDG_STATE_HOME is set to an
// absolute path (the XDG base directory specification ignores a relative
// one), else $HOME/.local/state/leasekeeper (the specification's default),
// else the working directory. It is persistent storage: a board lost with
// a tmpfs would restart every card's epoch (DESIGN.md#board-on-disk).
func (e Environment) StateHome() string {
	if d := e.getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "leasekeeper")
	}
	if h := e.getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".local", "state", "leasekeeper")
	}
	return e.WorkDir
}

// stateDir is where the agent keeps its bbolt file by default: the unit's
// state directory under systemd (StateDirectory=, /var/lib/leasekeeper
// for the shipped unit), else StateHome.
func (e Environment) stateDir() string {
	if d := e.systemdDir("STATE_DIRECTORY"); d != "" {
		return d
	}
	return e.StateHome()
}

// DefaultConfigPath is the config file the agent reads when --config is not
// given: agent.yaml in the unit's configuration directory under systemd
// (CONFIGURATION_DIRECTORY), when that file exists; "" otherwise (every key
// takes its default).
func (e Environment) DefaultConfigPath() string {
	d := e.systemdDir("CONFIGURATION_DIRECTORY")
	if d == "" {
		return ""
	}
	p := filepath.Join(d, "agent.yaml")
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	// Any other error (a file the agent may not read) is LoadConfig's to
	// report.
	return p
}

// DefaultSocketPath is the socket every client command tries when neither
// --socket nor LEASEKEEPER_SOCKET is given.
func (e Environment) DefaultSocketPath() string {
	return filepath.Join(e.RuntimeDir(), "leasekeeper.sock")
}

func (e Environment) getenv(k string) string {
	v, _ := e.lookup(k)
	return v
}

func (e Environment) lookup(k string) (string, bool) {
	if e.LookupEnv == nil {
		return os.LookupEnv(k)
	}
	return e.LookupEnv(k)
}

// ErrConfigEmpty refuses a config file that holds no YAML document (empty,
// or comments only), at start and on reload alike. Applied, it would switch
// every key to its default — the lease, the gate, the store and its path
// (a new, empty board) — which is never what emptying a file by mistake (a
// truncation, a failed template) meant. A file meant to say "all defaults"
// says `{}`; no file at all means that too.
var ErrConfigEmpty = errors.New("config file holds no YAML document (empty or comments only); write {} to mean every default")

// LoadConfig reads and validates the file at path. An empty path means no
// file: every key takes its default.
func LoadConfig(path string, env Environment) (Config, error) {
	if path == "" {
		return ParseConfig(nil, env)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	cfg, err := parseFile(data, env)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// parseFile is ParseConfig for the content of a config file, what the
// agent's start and every reload read: a file with no document is refused
// (ErrConfigEmpty), by both alike.
func parseFile(data []byte, env Environment) (Config, error) {
	if !hasDocument(data) {
		return Config{}, ErrConfigEmpty
	}
	return ParseConfig(data, env)
}

// hasDocument reports whether data holds a YAML document at all (not
// only whitespace and comments).
func hasDocument(data []byte) bool {
	var n yaml.Node
	err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&n)
	return !errors.Is(err, io.EOF)
}

// ParseConfig parses a YAML document strictly (unknown keys are errors that
// name the key and its line), applies defaults and validates.
func ParseConfig(data []byte, env Environment) (Config, error) {
	var fc fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("%w: %s", ErrConfig, describeYAMLError(err))
	}
	// A second document in the file is almost certainly a mistake (two
	// configs pasted together); refuse it rather than silently ignore it.
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return Config{}, fmt.Errorf("%w: line %d: a second YAML document is not allowed", ErrConfig, extra.Line)
	}
	cfg, err := fc.resolve(env)
	cfg.raw = bytes.Clone(data)
	return cfg, err
}

// yamlKeyPrefix maps the Go type yaml.v3 names in an unknown-field error to
// the dotted key prefix a user wrote.
var yamlKeyPrefix = map[string]string{
	"agent.fileConfig":    "",
	"agent.fileStore":     "store.",
	"agent.fileReaper":    "reaper.",
	"agent.fileRetention": "retention.",
	"agent.fileRetry":     "retry.",
	"board.State":         "states[].",
}

var unknownFieldRE = regexp.MustCompile(`line (\d+): field (\S+) not found in type (\S+)`)

// describeYAMLError rewrites yaml.v3's messages in the vocabulary of the
// config file: keys rather than Go types.
func describeYAMLError(err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return strings.TrimPrefix(err.Error(), "yaml: ")
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, m := range te.Errors {
		if sm := unknownFieldRE.FindStringSubmatch(m); sm != nil {
			m = fmt.Sprintf("line %s: unknown key %q", sm[1], yamlKeyPrefix[sm[3]]+sm[2])
		}
		msgs = append(msgs, m)
	}
	return strings.Join(msgs, "; ")
}

func keyErr(key, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrConfig, key, fmt.Sprintf(format, args...))
}

func (fc fileConfig) resolve(env Environment) (Config, error) {
	cfg := Config{
		BoardName:       DefaultBoardName,
		Lease:           DefaultLease,
		Liveness:        LivenessPID,
		UnleasedHorizon: DefaultUnleasedHorizon,
		Reaper:          ReaperConfig{Enabled: DefaultReaperEnabled, Interval: DefaultReaperInterval, Batch: DefaultReaperBatch},
		Retention:       RetentionConfig{Age: DefaultRetentionAge, PerPass: DefaultRetentionPerPass, Interval: DefaultRetentionInterval},
		Store:           storespec.Spec{Backend: BackendBolt},
	}
	if fc.Board != nil {
		if err := board.ValidateName("board", *fc.Board); err != nil || strings.ContainsAny(*fc.Board, `/\`) {
			return Config{}, keyErr("board", "%q is not a usable name (letters, digits, dashes; no slashes)", *fc.Board)
		}
		cfg.BoardName = *fc.Board
	}
	if fc.Store != nil {
		s := fc.Store
		if s.Backend != nil {
			if *s.Backend == "" {
				return Config{}, keyErr("store.backend", "empty: want bolt, mongo or the path of a plugin binary")
			}
			cfg.Store.Backend = *s.Backend
		}
		cfg.Store.Path = deref(s.Path)
		cfg.Store.URI = deref(s.URI)
		cfg.Store.Database = deref(s.Database)
		if s.AllowTmpfs != nil {
			if cfg.Store.Backend != BackendBolt {
				return Config{}, keyErr("store.allow_tmpfs", "set, but store.backend is %s (it is for a bbolt file)", cfg.Store.Backend)
			}
			cfg.AllowTmpfs = *s.AllowTmpfs
		}
	}
	// Defaults that depend on the environment and the board's name; the
	// spec's own rules are storespec's (Validate).
	switch cfg.Store.Backend {
	case BackendBolt:
		if cfg.Store.Path == "" && cfg.Store.URI == "" && cfg.Store.Database == "" {
			cfg.Store.Path = filepath.Join(env.stateDir(), cfg.BoardName+".db")
		}
	case BackendMongo:
		if cfg.Store.URI == "" && cfg.Store.Path == "" {
			cfg.Store.URI = DefaultMongoURI
		}
		if cfg.Store.Database == "" {
			cfg.Store.Database = cfg.BoardName
		}
	default:
		if cfg.Store.Path == "" && cfg.Store.URI == "" {
			cfg.Store.Path = filepath.Join(env.stateDir(), cfg.BoardName+".db")
		}
	}
	if err := cfg.Store.Validate(); err != nil {
		var ke *storespec.KeyError
		if errors.As(err, &ke) {
			return Config{}, keyErr(ke.Key, "%s", ke.Problem)
		}
		return Config{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}

	if fc.States != nil {
		cfg.Board = board.Board{States: fc.States}
		if err := cfg.Board.Validate(); err != nil {
			return Config{}, keyErr("states", "%v", err)
		}
	} else {
		// The local twin's default board lets a re-claim of a card in the
		// running column resume its recorded run (DESIGN.md#twin-repark).
		cfg.Board = board.DefaultBoard(cfg.Store.Backend != BackendMongo)
	}
	if r := fc.Retry; r != nil {
		if r.MaxAttempts != nil {
			if *r.MaxAttempts < 1 {
				return Config{}, keyErr("retry.max_attempts", "%d: want 1 or more", *r.MaxAttempts)
			}
			cfg.Board.Retry.MaxAttempts = *r.MaxAttempts
		}
		for _, d := range []struct {
			key string
			in  *duration
			out *time.Duration
		}{{"retry.backoff", r.Backoff, &cfg.Board.Retry.Backoff}, {"retry.backoff_max", r.BackoffMax, &cfg.Board.Retry.BackoffMax}} {
			if d.in == nil {
				continue
			}
			if d.in.d <= 0 {
				return Config{}, keyErr(d.key, "%s: want a positive duration", d.in.d)
			}
			*d.out = d.in.d
		}
		if err := cfg.Board.Retry.Validate(); err != nil {
			return Config{}, keyErr("retry", "%v", err)
		}
	}

	if fc.Lease != nil {
		cfg.Lease = fc.Lease.d
	}
	// A lease under 3s leaves the heartbeat under a second between renewals:
	// any store hiccup would lose claims. It is refused rather than clamped.
	if cfg.Lease < 3*time.Second {
		return Config{}, keyErr("lease", "%s is too short: the minimum is 3s (one renewal per second)", cfg.Lease)
	}

	if fc.Liveness != nil {
		cfg.Liveness = *fc.Liveness
	}
	if cfg.Liveness != LivenessPID && cfg.Liveness != LivenessKeepalive {
		return Config{}, keyErr("liveness", "%q: want pid or keepalive", cfg.Liveness)
	}

	if r := fc.Reaper; r != nil {
		if r.Enabled != nil {
			cfg.Reaper.Enabled = *r.Enabled
		}
		if r.Interval != nil {
			cfg.Reaper.Interval = r.Interval.d
		}
		if r.Batch != nil {
			cfg.Reaper.Batch = *r.Batch
		}
	}
	if cfg.Reaper.Interval < time.Second {
		return Config{}, keyErr("reaper.interval", "%s is too short: the minimum is 1s", cfg.Reaper.Interval)
	}
	if cfg.Reaper.Batch < 1 || cfg.Reaper.Batch > 10000 {
		return Config{}, keyErr("reaper.batch", "%d is out of range 1..10000", cfg.Reaper.Batch)
	}
	if v, ok := env.lookup(ReaperEnv); ok {
		// An invalid value turns the gate off: it is the lever an operator
		// pulls when they judge the watchdog wrong (DESIGN.md#gate).
		on, warning := watchdog.ParseGate(v)
		cfg.Reaper.Enabled = on
		if warning != "" {
			cfg.Warnings = append(cfg.Warnings, warning)
		}
	}

	if r := fc.Retention; r != nil {
		if r.Age != nil {
			cfg.Retention.Age = r.Age.d
		}
		if r.PerPass != nil {
			cfg.Retention.PerPass = *r.PerPass
		}
		if r.Interval != nil {
			cfg.Retention.Interval = r.Interval.d
		}
	}
	if cfg.Retention.Age < 0 {
		return Config{}, keyErr("retention.age", "%s is negative (0 keeps everything)", cfg.Retention.Age)
	}
	if cfg.Retention.Age > 0 && cfg.Retention.Age < time.Hour {
		return Config{}, keyErr("retention.age", "%s is too short: the minimum is 1h (0 keeps everything); prune now with leasekeeper prune --older-than", cfg.Retention.Age)
	}
	if cfg.Retention.PerPass < 1 || cfg.Retention.PerPass > board.MaxPruneLimit {
		return Config{}, keyErr("retention.per_pass", "%d is out of range 1..%d", cfg.Retention.PerPass, board.MaxPruneLimit)
	}
	if cfg.Retention.Interval < time.Minute {
		return Config{}, keyErr("retention.interval", "%s is too short: the minimum is 1m", cfg.Retention.Interval)
	}

	if fc.UnleasedHorizon != nil {
		cfg.UnleasedHorizon = fc.UnleasedHorizon.d
	}
	// DESIGN.md#unleased-arm: a missing lease is an absence, not evidence; the horizon
	// that turns it into a candidate must be much longer than a lease.
	if cfg.UnleasedHorizon < cfg.Lease {
		return Config{}, keyErr("unleased_horizon", "%s is below one lease (%s)", cfg.UnleasedHorizon, cfg.Lease)
	}

	cfg.OrphanGrace = cfg.HeartbeatInterval()
	if fc.OrphanGrace != nil {
		cfg.OrphanGrace = fc.OrphanGrace.d
	}
	if cfg.OrphanGrace < 0 {
		return Config{}, keyErr("orphan_grace", "%s is negative", cfg.OrphanGrace)
	}

	if fc.Operators != nil {
		cfg.Operators = slices.Clone([]uint32(*fc.Operators))
	} else {
		cfg.Operators = []uint32{0}
		if env.UID > 0 {
			cfg.Operators = append(cfg.Operators, uint32(env.UID))
		}
	}
	slices.Sort(cfg.Operators)
	cfg.Operators = slices.Compact(cfg.Operators)

	if fc.Metrics != nil && *fc.Metrics != "" {
		if _, _, err := net.SplitHostPort(*fc.Metrics); err != nil {
			return Config{}, keyErr("metrics", "%q is not a host:port TCP address: %v", *fc.Metrics, err)
		}
		cfg.Metrics = *fc.Metrics
	}

	level := DefaultLogLevel
	if fc.Log != nil {
		level = *fc.Log
	}
	lv, err := ParseLogLevel(level)
	if err != nil {
		return Config{}, keyErr("log", "%v", err)
	}
	cfg.LogLevel = lv

	cfg.Socket = env.agentSocketPath()
	if fc.Socket != nil {
		if *fc.Socket == "" {
			return Config{}, keyErr("socket", "empty")
		}
		cfg.Socket = *fc.Socket
	}
	if env.Socket != "" {
		cfg.Socket = env.Socket
	}
	return cfg, nil
}

// ParseLogLevel accepts debug, info, warn (or warning) and error.
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%q: want debug, info, warn or error", s)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// LiveKeys are the config keys a running agent applies when its file
// changes; every other key needs a restart (ReloadableDiff).
var LiveKeys = []string{"lease", "liveness", "reaper.enabled", "orphan_grace", "log"}

// ReloadableDiff lists the keys whose change needs a restart: the socket
// and the store are bound once at start.
func ReloadableDiff(old, next Config) (restart []string) {
	if old.Socket != next.Socket {
		restart = append(restart, "socket")
	}
	if !old.Store.Equal(next.Store) || old.AllowTmpfs != next.AllowTmpfs {
		restart = append(restart, "store")
	}
	if old.BoardName != next.BoardName {
		restart = append(restart, "board")
	}
	if old.Board.String() != next.Board.String() {
		restart = append(restart, "states")
	}
	if old.Metrics != next.Metrics {
		restart = append(restart, "metrics")
	}
	if !slices.Equal(old.Operators, next.Operators) {
		restart = append(restart, "operators")
	}
	if old.Reaper.Interval != next.Reaper.Interval || old.Reaper.Batch != next.Reaper.Batch {
		restart = append(restart, "reaper.interval/reaper.batch")
	}
	if old.Retention != next.Retention {
		restart = append(restart, "retention")
	}
	if old.UnleasedHorizon != next.UnleasedHorizon {
		restart = append(restart, "unleased_horizon")
	}
	return restart
}
