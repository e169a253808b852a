package serve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
)

// Serve runs the plugin side of the store boundary: it ties this process's
// life to the agent that started it, opens the store with open, serves it
// to the agent over gRPC until the agent stops the plugin, then closes the
// store. It is what the agent's hidden store-plugin subcommand runs, and
// what an external store plugin's main calls; open typically reads
// ChildConfigFromEnv.
//
// Serve returns an error when the process was not started by an agent,
// when the agent is already gone, or when open fails; the error is also
// written to stderr, which the agent logs and quotes in its start error.
func Serve(open func(ctx context.Context) (board.Store, error)) (err error) {
	// Keep the real stderr: go-plugin redirects os.Stderr while serving.
	stderr := os.Stderr
	defer func() {
		if err != nil {
			fmt.Fprintln(stderr, wire.ServeErrPrefix+strings.TrimPrefix(err.Error(), wire.ServeErrPrefix))
		}
	}()

	if os.Getenv(wire.Handshake.MagicCookieKey) != wire.Handshake.MagicCookieValue {
		return errors.New("this is a leasekeeper store plugin: the leasekeeper agent starts it, it is not run by hand")
	}
	release, err := bindToParent()
	if err != nil {
		return err
	}
	defer release()

	// SIGTERM while the store is opening cancels the open; once serving,
	// the default action applies again (the agent stops the plugin through
	// go-plugin's shutdown call, and a killed bbolt file is crash-safe).
	openCtx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	store, err := open(openCtx)
	stopSignals()
	if err != nil {
		return fmt.Errorf("opening the store: %w", err)
	}
	defer func() {
		if cerr := store.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("store plugin: closing the store: %w", cerr)
		}
	}()

	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  wire.Handshake,
		VersionedPlugins: VersionedPlugins(store),
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return plugin.DefaultGRPCServer(append(opts, wire.StaticWindowServerOptions...))
		},
		// JSON lines on the real stderr: the agent's go-plugin client parses
		// them and relays each at its level to the agent's logger.
		Logger: hclog.New(&hclog.LoggerOptions{
			Name:       "store-plugin",
			Level:      hclog.Info,
			Output:     stderr,
			JSONFormat: true,
		}),
	})
	return nil
}
