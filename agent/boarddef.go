package agent

import (
	"log/slog"
	"strings"

	"github.com/leasekeeper/leasekeeper/board"
)

// warnBoardDrift says so, at start, when the states this agent was
// configured with differ from the board definition stored in its store.
// The stored definition wins — it is what every agent sharing the store
// uses, and what `leasekeeper board state ...` changes (DESIGN.md#board-in-store) — but
// an agent must never diverge from its own configuration silently: the
// operator either meant the stored board (and should update the config)
// or pointed the agent at the wrong store.
func warnBoardDrift(log *slog.Logger, configured, stored board.Board) bool {
	diff := configured.DiffNamed(stored, "configured", "stored")
	if len(diff) == 0 {
		return false
	}
	log.Warn("the configured states differ from the board stored in the store; using the stored board (update the config's states to match, or check store.path / store.database)",
		"differences", strings.Join(diff, "; "), "configured", configured.String(), "stored", stored.String())
	return true
}
