package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

// TestFleetCountsTheWire runs the fleet scenario at tiny sizes against the
// MongoDB-wire test server and checks its counts against what the twin is
// known to send: a tick of RenewChunk+1 holds is two update commands of
// RenewChunk+1 statements in all, an idle events poll writes nothing, and
// every verb sends at least one command.
func TestFleetCountsTheWire(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the MongoDB-wire test server; skipped with -short")
	}
	uri := mongotest.URI(t)
	rep := &report{}
	over := mongostore.RenewChunk + 1
	sz := fleetSizes{repeat: 1, renewN: []int{1, over}, agents: []int{1, 2}, perAgent: 1,
		dbPrefix: mongotest.Database(t)}
	if err := measureFleet(t.Context(), uri, sz, rep); err != nil {
		t.Fatal(err)
	}
	rows := map[string]float64{}
	for _, r := range rep.sections[0].rows {
		if len(r.vals) != 1 {
			t.Fatalf("row %q has %d values, want 1", r.name, len(r.vals))
		}
		rows[r.name] = r.vals[0]
		if strings.HasSuffix(r.name, ": commands") && r.vals[0] < 1 {
			t.Errorf("%s: %v commands, want at least one", r.name, r.vals[0])
		}
	}
	want := map[string]float64{
		fmt.Sprintf("heartbeat tick, RenewClaims of %d claims: writes", over):     2,
		fmt.Sprintf("heartbeat tick, RenewClaims of %d claims: statements", over): float64(over),
		"heartbeat tick, RenewClaims of 1 claim: writes":                          1,
		"heartbeat tick, RenewClaims of 1 claim: statements":                      1,
		"idle Events() poll: writes":                                              0,
	}
	for name, w := range want {
		got, ok := rows[name]
		if !ok {
			t.Errorf("no row %q", name)
			continue
		}
		if got != w {
			t.Errorf("%s = %v, want %v", name, got, w)
		}
	}
	// The fleet's budgets (DESIGN.md#event-log): a lifecycle is at most 8
	// commands, its events included; an idle poll at most 2; and agents
	// side by side cost no more per lifecycle than 1.25 times one alone.
	find := func(prefix string) float64 {
		t.Helper()
		for name, v := range rows {
			if strings.HasPrefix(name, prefix) {
				return v
			}
		}
		t.Fatalf("no row starting %q", prefix)
		return 0
	}
	if got := find("Start by id of a fresh card: commands") + find("Finish → done: commands"); got > 8 {
		t.Errorf("Start + Finish = %v commands, want at most 8", got)
	}
	if got := find("idle Events() poll: commands"); got > 2 {
		t.Errorf("an idle poll = %v commands, want at most 2", got)
	}
	alone, together := find("lifecycle (Start + Finish), 1 agent side by side, per lifecycle (mean): commands"), find("lifecycle (Start + Finish), 2 agents side by side, per lifecycle (mean): commands")
	if together > 1.25*alone {
		t.Errorf("a lifecycle with 2 agents side by side = %v commands, want at most 1.25 × %v alone", together, alone)
	}
}
