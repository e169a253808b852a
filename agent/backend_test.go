package agent

import (
	"path/filepath"
	"testing"

	"github.com/leasekeeper/leasekeeper/apitype"
)

// TestStatusBackendInProcess: an agent that cannot re-execute itself (no
// Options.PluginCommand) opens its built-in store in its own process and
// says so: the backend's name, the board file, no plugin, no plugin
// process.
func TestStatusBackendInProcess(t *testing.T) {
	t.Parallel()
	r := startRun(t, runOpts{})
	st := r.status(t)
	if want := (apitype.Backend{Name: BackendBolt, Path: filepath.Join(r.dir, "board.db")}); st.Backend != want {
		t.Errorf("backend = %+v, want %+v", st.Backend, want)
	}
	if st.Store.Plugin != nil {
		t.Errorf("store plugin = %+v for an in-process store", st.Store.Plugin)
	}
}
