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
// every verb sends at least one command. Its reapers side by side share
// the expired claims: with 4 agents each expired card is examined once,
// and no transfer is lost to another reaper.
func TestFleetCountsTheWire(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the MongoDB-wire test server; skipped with -short")
	}
	uri := mongotest.URI(t)
	rep := &report{}
	over := mongostore.RenewChunk + 1
	sz := fleetSizes{repeat: 1, renewN: []int{1, over}, agents: []int{1, 2}, perAgent: 1,
		reapAgents: []int{1, 4}, expired: 24,
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
	// The fleet's reapers share the work (DESIGN.md#reaper-shares): one
	// agent examines each expired card once, and so do 4 side by side,
	// each listing only its share, where without the split each of them
	// would examine every card and lose the transfer of three in four. An
	// idle pass is the reaper's record written, the records read and one
	// query per arm of the listing (the clock reading apart).
	reap := func(a int, figure string) float64 {
		t.Helper()
		return find(fmt.Sprintf("reaper pass over a dead host's 24 expired claims, %s side by side%s", plural(a, "agent"), figure))
	}
	if got := reap(1, ": examinations per expired card"); got != 1 {
		t.Errorf("one reaper alone: %v examinations per expired card, want 1", got)
	}
	if got := reap(4, ": examinations per expired card"); got > 1.25 {
		t.Errorf("4 reapers side by side: %v examinations per expired card, want at most 1.25", got)
	}
	if got := reap(4, ": transfers lost"); got != 0 {
		t.Errorf("4 reapers side by side lost %v transfers to one another, want 0", got)
	}
	if got := find("idle reaper pass (nothing expired), per agent per pass (mean): commands"); got > 4 {
		t.Errorf("an idle reaper pass = %v commands, want at most 4", got)
	}
	if got := find("idle reaper pass (nothing expired), per agent per pass (mean): writes"); got != 1 {
		t.Errorf("an idle reaper pass = %v writes, want 1 (its record)", got)
	}
	shared := 0
	for _, g := range rep.goals {
		if strings.HasPrefix(g.target, "reapers share the work") {
			shared++
			if !g.met {
				t.Errorf("goal %q missed: %s", g.target, g.measured)
			}
		}
	}
	if shared != 1 {
		t.Errorf("%d goals on the reapers' sharing, want 1 (4 agents)", shared)
	}
}
