package apitype

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBackendShape: the status carries the backend as an object, the
// plugin absent for an in-process store, and prints it readably.
func TestBackendShape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		b        Backend
		json     string
		readable string
	}{
		{Backend{Name: "bolt"}, `"backend":{"name":"bolt"}`, "bolt (in-process)"},
		{Backend{Name: "mongo", Plugin: "/usr/bin/leasekeeper"}, `"backend":{"name":"mongo","plugin":"/usr/bin/leasekeeper"}`, "mongo (plugin /usr/bin/leasekeeper)"},
		{Backend{Name: "/opt/store", Plugin: "/opt/store"}, `"backend":{"name":"/opt/store","plugin":"/opt/store"}`, "/opt/store (plugin)"},
	} {
		b, err := json.Marshal(Status{Backend: tc.b})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), tc.json) {
			t.Errorf("status JSON %s lacks %s", b, tc.json)
		}
		if got := tc.b.String(); got != tc.readable {
			t.Errorf("%+v prints %q, want %q", tc.b, got, tc.readable)
		}
	}
}
