package watchdog

import (
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
)

// TestOracleConservesOnAnotherCardsRun: a pointer whose run belongs to
// another card (two runs created with one id, on a store that cannot index
// run ids) is not this card's verdict to act on: the oracle reports a read
// error, which conserves (row 1), instead of filing the card by someone
// else's run.
func TestOracleConservesOnAnotherCardsRun(t *testing.T) {
	e := newEnv(t)
	e.card("c1", board.StateReady)
	_, run := e.launch("c1", board.RunFinished, board.Run{})
	other := run
	other.Card = "c2"
	e.faults.mu.Lock()
	e.faults.staleRun = &other
	e.faults.mu.Unlock()
	o := &Oracle{Store: e.faults, Host: workerHost, Prober: e.probe}
	res := o.Read(e.ctx, e.get("c1"))
	if res.Err == nil || res.Run != nil {
		t.Fatalf("the oracle read another card's run as c1's: run %+v err %v", res.Run, res.Err)
	}
	c := e.get("c1")
	if got := DecideStuckCard(StuckCard{Run: res.Run, RunErr: res.Err, Card: c, RecordedRunID: res.Recorded, Board: board.DefaultBoard(true), Now: t0, Lease: lease}); got.Action != ActionKeep {
		t.Errorf("a card whose pointer names another card's run was decided %s, want keep", got.Action)
	}
}
