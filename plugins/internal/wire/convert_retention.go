package wire

import (
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// The conversions of the retention verbs (board.Retention,
// DESIGN.md#retention). A plugin from before protocol 6 is never sent them
// (plugins.versionGuard).

func ToPruneReply(r board.PruneResult) *storepb.PruneReply {
	return &storepb.PruneReply{
		Runs: int64(r.Runs), Events: int64(r.Events), Cards: ToStrings(r.Cards),
		EventsThrough: r.EventsThrough, More: r.More, DryRun: r.DryRun,
	}
}

func FromPruneReply(r *storepb.PruneReply) board.PruneResult {
	cards := FromStrings(r.GetCards())
	if cards == nil {
		cards = []string{}
	}
	return board.PruneResult{
		Runs: int(r.GetRuns()), Events: int(r.GetEvents()), Cards: cards,
		EventsThrough: r.GetEventsThrough(), More: r.GetMore(), DryRun: r.GetDryRun(),
	}
}
