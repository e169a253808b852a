package main

import (
	"context"

	"github.com/leasekeeper/leasekeeper/agent"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/serve"
	"github.com/leasekeeper/leasekeeper/storespec"
)

// runStorePlugin is the hidden subcommand: the agent re-executes its own
// binary with it to serve the built-in store (bbolt or MongoDB) as a
// go-plugin plugin, the way Nomad runs its executor.
func runStorePlugin(_ context.Context, _ *cli) error {
	return serve.Serve(func(ctx context.Context) (board.Store, error) {
		spec, err := storespec.FromEnv()
		if err != nil {
			return nil, err
		}
		return agent.OpenBuiltinStore(ctx, spec, board.SystemClock{})
	})
}
