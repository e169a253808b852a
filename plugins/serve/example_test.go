package serve_test

import (
	"context"
	"os"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/serve"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// The main function of an external store plugin: the agent starts the
// binary named by store.backend and hands it its store configuration.
func ExampleServe() {
	err := serve.Serve(func(ctx context.Context) (board.Store, error) {
		cfg, err := serve.ChildConfigFromEnv()
		if err != nil {
			return nil, err
		}
		return boltstore.Open(cfg.Path, boltstore.Options{Board: cfg.Board, LockTimeout: 5 * time.Second})
	})
	if err != nil {
		os.Exit(1) // Serve has written the error to stderr, which the agent logs
	}
}
