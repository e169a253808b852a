// Package watchdog is leasekeeper's fenced watchdog (ADR-096 §3, §4, §8, §9):
// the one pure decision table every caller shares (DecideStuckCard), the
// liveness oracle that promotes a run to PROCESS_ORPHANED only on proof that
// no live owner holds it (Oracle), and the reaper engine (Reaper) that lists
// expired claims, transfers each to a recovery owner by CAS before touching
// anything, re-decides on the card the transfer observed, and then files,
// returns, releases or holds the card.
//
// The gate (LEASEKEEPER_REAPER / reaper.enabled) stops DECISIONS only. The
// repair sweeps — releasing abandoned recovery claims and, on the fleet twin,
// un-leased claims whose run already settled — run on every pass whatever
// the gate says, because releasing a claim nobody can use restores the card
// to what it was, whereas filing it would be a decision (ADR-096 §8). The
// recovery sweep lists only the recovery claims (board.CardFilter
// RecoveryOnly, an index in every store), so its cost does not grow with
// the worker claims held or expired, and no pass ever skips it.
//
// The cards of one pass are worked on concurrently (Config.Workers), so the
// durable writes of different cards share the local store's group commit.
package watchdog
