package board

import (
	"errors"
	"testing"
)

// TestParseMarkerPIDRules pins who may be pid 1: an agent (its own marker
// and the recovery marker derived from it), because an agent is the init of
// its container when workers join its pid namespace; never a worker, whose
// pid 1 would be an init and pid 0 an invisible peer.
func TestParseMarkerPIDRules(t *testing.T) {
	tests := []struct {
		in     string
		worker bool // ParseMarker accepts it
		agent  bool // ParseAgentMarker accepts it
		want   Marker
	}{
		{"host-42", true, true, Marker{Host: "host", PID: 42}},
		{"my-host.example-2", true, true, Marker{Host: "my-host.example", PID: 2}},
		{"host-1", false, true, Marker{Host: "host", PID: 1}},
		{"host-0", false, false, Marker{}},
		{"reaper:host-1", true, false, Marker{Host: "host", PID: 1, Recovery: true}},
		{"reaper:host-42", true, false, Marker{Host: "host", PID: 42, Recovery: true}},
		{"reaper:host-0", false, false, Marker{}},
		{"reaper:", false, false, Marker{}},
		{"host", false, false, Marker{}},
		{"-5", false, false, Marker{}},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			m, err := ParseMarker(tc.in)
			if (err == nil) != tc.worker {
				t.Errorf("ParseMarker(%q) err = %v, want ok %v", tc.in, err, tc.worker)
			}
			if err != nil && !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("ParseMarker(%q) err = %v, want ErrInvalidArgument", tc.in, err)
			}
			if err == nil {
				if m != tc.want {
					t.Errorf("ParseMarker(%q) = %+v, want %+v", tc.in, m, tc.want)
				}
				if m.String() != tc.in {
					t.Errorf("ParseMarker(%q).String() = %q", tc.in, m.String())
				}
			}
			am, err := ParseAgentMarker(tc.in)
			if (err == nil) != tc.agent {
				t.Errorf("ParseAgentMarker(%q) err = %v, want ok %v", tc.in, err, tc.agent)
			}
			if err == nil && am != tc.want {
				t.Errorf("ParseAgentMarker(%q) = %+v, want %+v", tc.in, am, tc.want)
			}
		})
	}
	// The agent's recovery marker as pid 1 is a valid claim marker, so a
	// store accepts a reclaim under it and the token it hands out.
	rec := RecoveryMarker(AgentMarker("ctr", 1))
	if err := (ReclaimExpiredParams{Card: "c", RecoveryMarker: rec, Lease: 1}).ValidateRecovery(); err != nil {
		t.Errorf("reclaim under %s: %v", rec, err)
	}
	if err := ValidateToken("c", ClaimToken{Marker: rec, Epoch: 3}); err != nil {
		t.Errorf("token %s: %v", rec, err)
	}
	if err := (ClaimParams{Card: "c", Marker: WorkerMarker("ctr", 1), Lease: 1}).Validate(); err == nil {
		t.Error("a worker claim as pid 1 was accepted")
	}
}
