// Package watchdog is leasekeeper's fenced watchdog (DESIGN.md#transfer-first):
// the one pure decision table every caller shares (DecideStuckCard), the
// liveness oracle that promotes a run to PROCESS_ORPHANED only on proof that
// no live owner holds it (Oracle), and the reaper engine (Reaper) that lists
// expired claims, transfers each to a recovery owner by CAS before touching
// anything, re-decides on the card the transfer observed, and then files,
// returns, releases or holds the card.
//
// Every pass reads the store's clock once (board.Store.Now) and judges
// every store-stamped time by it; the agent's own clock never decides
// whether a lease ended. A card is judged only by the run pointer its
// judged claim stamped (ClaimRun), and no path leaves a card free in a
// column nothing picks up (Strands).
//
// The gate (LEASEKEEPER_REAPER / reaper.enabled) stops DECISIONS only.
// With it on, each pass decides one page of expired claims — recovery
// claims among them — and the next pass pages on, so kept claims never
// starve the listing. With it off, the repair sweeps run instead: abandoned
// recovery claims are released in one CAS on their whole precondition, or,
// where a release would strand the card, filed by their run's settled
// verdict; on the fleet twin, un-leased claims whose run settled are filed
// the same way. The recovery sweep lists only the recovery claims
// (board.ListCardsParams RecoveryOnly, an index in every store), so its cost
// does not grow with the worker claims held or expired.
//
// The cards of one pass are worked on concurrently (Config.Workers), so the
// durable writes of different cards share the local store's group commit.
package watchdog
