// Package boltstore is the local twin of board.Store: one bbolt file on one
// host, written by one agent process (DESIGN.md#twins, the embedded default).
//
// Layout. Every bucket lives at the top level of the file:
//
//	meta         schema version (a newer file is refused, never reset; an
//	             older one is migrated at Open, see migrate.go)
//	cards        card id → JSON card document, without the claim family
//	claims       card id → fixed-layout binary claim record (keys.go):
//	             claim_epoch, claimed_at, claim_lease_until, claim; only
//	             cards that were ever claimed have one
//	runs         run id  → JSON run
//	events       8-byte big-endian seq (bucket sequence) → JSON event
//	idx_state    state 0x00 created seq id → 1 byte: 1 claimed, 0 free
//	idx_created  created seq id → empty
//	idx_claim    created seq id → empty, claimed cards only
//	idx_lease    lease-until id → empty, claimed cards with a lease only
//	idx_deps     blocker 0x00 dependent → empty
//	idx_recovery created seq id → empty, cards held by a recovery
//	             (reaper:) claim only (since schema version 3)
//	idx_label    label 0x00 state 0x00 created seq id → 1 byte: 1 claimed,
//	             0 free; once per label a card carries (since schema
//	             version 5, DESIGN.md#label-routing)
//
// "created" is the card's created_at in sortable nanoseconds and "seq" its
// creation sequence, which breaks ties between cards created in the same
// instant so creation order is total. Card ids and state names cannot
// contain 0x00 (board.ValidateName refuses control characters), so the
// separator is unambiguous. Indexes are written in the same transaction as
// the card, through one function (putCard), so they cannot drift; the one
// exception is a lease change (renewal, same-marker re-claim, early
// expiry), which rewrites only the claim record and the lease index entry
// (setLease), because a lease is all it changes.
//
// idx_recovery is the recovery sweep's population (DESIGN.md#recovery-sweep): the
// watchdog releases abandoned recovery claims on every pass, and reading
// them through their own index costs O(recovery claims) where the expired
// listing would read every expired worker claim as well. It is derived from
// the marker like the other indexes, so every claim change (claim, reclaim,
// release) keeps it in step in the same transaction; a lease change never
// touches it.
//
// The claim family has its own bucket since schema version 2 for two
// reasons. A heartbeat renews every claim the agent holds in one write, and
// decoding and re-encoding whole JSON cards for that dominated its cost
// (the heartbeat tick of 10,000 claims). And the contract says ordinary writes never touch the claim
// family: here they cannot, because they do not write the claims bucket.
//
// Writes go through a group committer (see commit.go): concurrent writers
// share one transaction and one fsync, and each write is isolated from the
// others in its batch by a per-write overlay, so a refused write leaves
// nothing behind.
package boltstore
