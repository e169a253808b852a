package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
)

// fleetAgents starts two real agents sharing one MongoDB-wire database, as
// two hosts of a fleet.
func fleetAgents(t *testing.T) (one, two *env) {
	t.Helper()
	uri, db := mongotest.URI(t), mongotest.Database(t)
	agents := make([]*env, 2)
	for i := range agents {
		e := newEnv(t, "")
		cfg := fmt.Sprintf("socket: %s\nstore: {backend: mongo, uri: %q, database: %s}\n", e.Socket, uri, db)
		if err := os.WriteFile(e.Config, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		e.Start()
		agents[i] = e
	}
	return agents[0], agents[1]
}

// TestE2EBoardAdministrationFleet runs two real agents on one MongoDB-wire
// database: a state rename through one is the board both serve, and a
// label sweep through the other changes the cards both see.
func TestE2EBoardAdministrationFleet(t *testing.T) {
	t.Parallel()
	one, two := fleetAgents(t)

	one.MustRun("card", "create", "a", "--state", "ready", "--label", "old")
	one.MustRun("board", "state", "rename", "ready", "queued")

	var shown apitype.BoardResponse
	if err := json.Unmarshal([]byte(two.MustRun("board", "show", "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	b := board.Board{States: shown.States}
	if !b.Has("queued") || b.Has("ready") || shown.FirstPool != "queued" {
		t.Errorf("board served by the other agent = %s (first pool %q), want the renamed one", b, shown.FirstPool)
	}
	two.MustRun("card", "create", "b", "--state", "queued", "--label", "old")

	var rep board.SweepReport
	if err := json.Unmarshal([]byte(two.MustRun("board", "label", "rename", "old", "new", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Changed, []string{"a", "b"}) {
		t.Errorf("label rename through the other agent changed %q, want [a b]", rep.Changed)
	}
	for _, id := range []string{"a", "b"} {
		if c := one.Card(id); c.State != "queued" || !slices.Equal(c.Labels, []string{"new"}) {
			t.Errorf("card %s seen by the first agent: state %q labels %q, want queued [new]", id, c.State, c.Labels)
		}
	}
}
