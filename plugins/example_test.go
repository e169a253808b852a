package plugins_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins"
	"github.com/leasekeeper/leasekeeper/storespec"
)

// The agent's side: launch the plugin, use the proxy as the store, and show
// its state in the agent's status.
func ExampleLaunch() {
	ctx := context.Background()
	self, _ := os.Executable()
	store, err := plugins.Launch(ctx, plugins.LaunchConfig{
		// The agent re-executes its own binary to serve a built-in store.
		Cmd: func() *exec.Cmd { return exec.Command(self, "store-plugin") },
		Child: &storespec.Spec{
			Backend: "bolt", Path: "/var/lib/leasekeeper/board.db",
			Board: board.DefaultBoard(true), Lease: 30 * time.Second,
		},
		Logger: slog.Default(),
	})
	if err != nil {
		fmt.Println(err) // says whether the binary is missing, not a plugin, or another protocol version
		return
	}
	defer store.Close()
	st := store.Status()
	fmt.Println(st.State, st.PID, st.Restarts, st.LastError)
}
