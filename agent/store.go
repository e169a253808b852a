package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// StoreLockTimeout bounds the wait for the bbolt file lock. bbolt waits
// forever by default, and a plugin process orphaned by a killed agent may
// still hold the lock for a moment (PITFALLS).
const StoreLockTimeout = 10 * time.Second

// StoreSpec is everything needed to open a built-in store; the plugin
// child receives the same values.
type StoreSpec struct {
	Backend         string
	Path            string
	URI             string
	Database        string
	Board           board.Board
	Lease           time.Duration
	UnleasedHorizon time.Duration
}

// SpecOf extracts the store settings of cfg.
func SpecOf(cfg Config) StoreSpec {
	return StoreSpec{
		Backend:         cfg.Store.Backend,
		Path:            cfg.Store.Path,
		URI:             cfg.Store.URI,
		Database:        cfg.Store.Database,
		Board:           cfg.Board,
		Lease:           cfg.Lease,
		UnleasedHorizon: cfg.UnleasedHorizon,
	}
}

// OpenBuiltinStore opens bolt or mongo in this process. The agent calls it
// in the plugin child (the hidden subcommand) or in-process.
func OpenBuiltinStore(ctx context.Context, spec StoreSpec, clock board.Clock) (board.Store, error) {
	switch spec.Backend {
	case BackendBolt:
		if dir := filepath.Dir(spec.Path); dir != "" {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return nil, fmt.Errorf("store.path: %w", err)
			}
		}
		s, err := boltstore.Open(spec.Path, boltstore.Options{Board: spec.Board, Clock: clock, LockTimeout: StoreLockTimeout})
		if err != nil {
			return nil, fmt.Errorf("open bolt store %s: %w", spec.Path, err)
		}
		return s, nil
	case BackendMongo:
		return openMongo(ctx, spec, clock)
	}
	return nil, fmt.Errorf("%w: store.backend %q is not a built-in store", ErrConfig, spec.Backend)
}

// openStore opens the configured store: in-process for now.
func (a *Agent) openStore(ctx context.Context, cfg Config) error {
	s, err := OpenBuiltinStore(ctx, SpecOf(cfg), a.clock)
	if err != nil {
		return err
	}
	a.store = s
	a.closeFn = s.Close
	a.backend = func() string { return cfg.Store.Backend + " (in-process)" }
	return nil
}
