package plugins

import (
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
)

// TestTraitsCrossTheHandshake: the agent learns what a store is from what
// the store declares in its first reply, not from the name it was started
// under — an external plugin that says it is shared is treated as shared,
// and one that says nothing is not.
func TestTraitsCrossTheHandshake(t *testing.T) {
	for _, want := range []board.Traits{
		{},
		{Shared: true, ServerClock: true, Outbox: true},
		{Shared: true},
		{ServerClock: true},
		{Outbox: true},
	} {
		rs := inProcess(t, &scripted{traits: want})
		if got := rs.Traits(); got != want {
			t.Errorf("a plugin declaring %+v is seen as %+v", want, got)
		}
	}
	if got := inProcess(t, openBolt(t, board.DefaultBoard(true), nil)).Traits(); got != (board.Traits{}) {
		t.Errorf("the bbolt store through the plugin declares %+v, want none of the traits", got)
	}
}
