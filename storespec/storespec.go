// Package storespec describes the store an agent opens: which backend,
// where it lives, and the parameters it is opened with. One Spec is what
// the agent's configuration resolves to, what the agent hands its store
// plugin in the environment, and what the plugin child opens; it is
// validated, printed for logs and encoded for the child in one place.
package storespec

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/store/mongo/connstr"
)

// Backends known by name. Any other Backend is the path of a plugin binary.
const (
	Bolt  = "bolt"
	Mongo = "mongo"
)

// Env is the environment variable through which the agent hands a store
// plugin its Spec, as JSON (see Environ).
const Env = "LEASEKEEPER_STORE_CONFIG"

// ErrInvalid marks every error of Validate.
var ErrInvalid = errors.New("invalid store spec")

// Spec is everything needed to open a store. In the agent's configuration
// Backend, Path, URI and Database are the store.* keys; Board, Lease and
// UnleasedHorizon are filled from the keys of their own (states, lease,
// unleased_horizon) when the store is opened.
type Spec struct {
	// Backend is Bolt, Mongo, or the path of an external plugin binary.
	Backend string `json:"backend"`
	// Path is the bbolt file (store.path).
	Path string `json:"path,omitempty"`
	// URI and Database locate MongoDB (store.uri, store.database). URI may
	// carry secrets: print a Spec through its LogValue or Redacted, never
	// the field itself.
	URI      string `json:"uri,omitempty"`
	Database string `json:"database,omitempty"`
	// Board is the board the store is seeded with when it is first
	// created; after that the stored definition wins.
	Board board.Board `json:"board"`
	// Lease is the claim lease.
	Lease time.Duration `json:"-"`
	// UnleasedHorizon is the age past which the fleet twin lists un-leased
	// claims (DESIGN.md#unleased-sweep).
	UnleasedHorizon time.Duration `json:"-"`
}

// IsPlugin reports whether Backend names an external plugin binary.
func (s Spec) IsPlugin() bool { return s.Backend != Bolt && s.Backend != Mongo }

// Equal reports whether two specs open the same store the same way.
func (s Spec) Equal(o Spec) bool {
	return s.Backend == o.Backend && s.Path == o.Path && s.URI == o.URI && s.Database == o.Database &&
		s.Board.Equal(o.Board) && s.Lease == o.Lease && s.UnleasedHorizon == o.UnleasedHorizon
}

// With returns s with its open parameters set.
func (s Spec) With(b board.Board, lease, unleasedHorizon time.Duration) Spec {
	s.Board, s.Lease, s.UnleasedHorizon = b, lease, unleasedHorizon
	return s
}

// Validate checks that the keys fit the backend: a bbolt store has a path
// and no MongoDB keys; a MongoDB store has a mongodb:// or mongodb+srv://
// URI, a database and no path; a plugin binary exists and is executable
// (so a typo fails at start rather than at the first store call). A board,
// when one is set, must validate, and the durations must not be negative.
// Each error names the config key at fault and wraps ErrInvalid; a URI is
// quoted redacted.
func (s Spec) Validate() error {
	switch s.Backend {
	case "":
		return keyErr("store.backend", "empty: want bolt, mongo or the path of a plugin binary")
	case Bolt:
		if s.URI != "" || s.Database != "" {
			return keyErr("store.uri", "set, but store.backend is bolt (store.uri and store.database are for mongo)")
		}
		if s.Path == "" {
			return keyErr("store.path", "empty: the bolt store needs a file")
		}
	case Mongo:
		if s.Path != "" {
			return keyErr("store.path", "set, but store.backend is mongo (store.path is for bolt)")
		}
		if !strings.HasPrefix(s.URI, "mongodb://") && !strings.HasPrefix(s.URI, "mongodb+srv://") {
			return keyErr("store.uri", "%q is not a mongodb:// or mongodb+srv:// URI", connstr.Redact(s.URI))
		}
		if s.Database == "" {
			return keyErr("store.database", "empty")
		}
	default:
		fi, err := os.Stat(s.Backend)
		if err != nil {
			return keyErr("store.backend", "%q is neither bolt, mongo nor a plugin binary: %v", s.Backend, err)
		}
		if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return keyErr("store.backend", "plugin %q is not an executable file", s.Backend)
		}
	}
	if len(s.Board.States) > 0 {
		if err := s.Board.Validate(); err != nil {
			return keyErr("states", "%v", err)
		}
	}
	if s.Lease < 0 {
		return keyErr("lease", "%s is negative", s.Lease)
	}
	if s.UnleasedHorizon < 0 {
		return keyErr("unleased_horizon", "%s is negative", s.UnleasedHorizon)
	}
	return nil
}

// KeyError is a Validate error: the config key at fault and what is wrong
// with it. It wraps ErrInvalid.
type KeyError struct {
	Key     string
	Problem string
}

func (e *KeyError) Error() string { return ErrInvalid.Error() + ": " + e.Key + ": " + e.Problem }
func (e *KeyError) Unwrap() error { return ErrInvalid }

func keyErr(key, format string, args ...any) error {
	return &KeyError{Key: key, Problem: fmt.Sprintf(format, args...)}
}

// Redacted returns s with the secrets of its URI replaced (see
// connstr.Redact), fit for a log line, a status field or an error.
func (s Spec) Redacted() Spec {
	if s.URI != "" {
		s.URI = connstr.Redact(s.URI)
	}
	return s
}

// LogValue prints s in a log record with its URI redacted and without the
// board (logged on its own where it matters).
func (s Spec) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("backend", s.Backend)}
	if s.Path != "" {
		attrs = append(attrs, slog.String("path", s.Path))
	}
	if s.URI != "" {
		attrs = append(attrs, slog.String("uri", connstr.Redact(s.URI)))
	}
	if s.Database != "" {
		attrs = append(attrs, slog.String("database", s.Database))
	}
	return slog.GroupValue(attrs...)
}

// String is what %v prints: the backend and where it lives, redacted.
func (s Spec) String() string {
	switch {
	case s.Backend == Mongo:
		return s.Backend + " " + connstr.Redact(s.URI) + " database " + s.Database
	case s.Path != "":
		return s.Backend + " " + s.Path
	}
	return s.Backend
}

// jsonSpec is the wire form: durations spelled in Go syntax ("30s"), so a
// plugin author reading the variable sees what the config file said.
type jsonSpec struct {
	Backend         string      `json:"backend"`
	Path            string      `json:"path,omitempty"`
	URI             string      `json:"uri,omitempty"`
	Database        string      `json:"database,omitempty"`
	Board           board.Board `json:"board"`
	Lease           string      `json:"lease,omitempty"`
	UnleasedHorizon string      `json:"unleased_horizon,omitempty"`
}

// MarshalJSON writes the wire form (durations in Go syntax).
func (s Spec) MarshalJSON() ([]byte, error) {
	j := jsonSpec{Backend: s.Backend, Path: s.Path, URI: s.URI, Database: s.Database, Board: s.Board}
	if s.Lease != 0 {
		j.Lease = s.Lease.String()
	}
	if s.UnleasedHorizon != 0 {
		j.UnleasedHorizon = s.UnleasedHorizon.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the wire form.
func (s *Spec) UnmarshalJSON(b []byte) error {
	var j jsonSpec
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	out := Spec{Backend: j.Backend, Path: j.Path, URI: j.URI, Database: j.Database, Board: j.Board}
	var err error
	if j.Lease != "" {
		if out.Lease, err = time.ParseDuration(j.Lease); err != nil {
			return fmt.Errorf("lease: %w", err)
		}
	}
	if j.UnleasedHorizon != "" {
		if out.UnleasedHorizon, err = time.ParseDuration(j.UnleasedHorizon); err != nil {
			return fmt.Errorf("unleased_horizon: %w", err)
		}
	}
	*s = out
	return nil
}

// Environ returns the "NAME=value" entry that hands s to a plugin process.
func (s Spec) Environ() (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("store plugin config: %w", err)
	}
	return Env + "=" + string(b), nil
}

// FromEnv reads the Spec the agent passed to this plugin process. A missing
// variable is an error naming it: a store plugin is started by the agent,
// never by hand. The Spec is not validated here: a plugin checks what it
// serves (Validate checks what the agent's own stores need).
func FromEnv() (Spec, error) {
	v, ok := os.LookupEnv(Env)
	if !ok {
		return Spec{}, fmt.Errorf("store plugin config: %s is not set (the agent sets it when it starts the plugin)", Env)
	}
	var s Spec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return Spec{}, fmt.Errorf("store plugin config: %s: %w", Env, err)
	}
	return s, nil
}
