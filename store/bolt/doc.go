// Package boltstore is the local twin of board.Store: one bbolt file on one
// host, written by one agent process (ADR-096 §7, the embedded default).
//
// Layout. Every bucket lives at the top level of the file:
//
//	meta         schema version (a newer file is refused, never reset)
//	cards        card id → JSON card record
//	runs         run id  → JSON run
//	events       8-byte big-endian seq (bucket sequence) → JSON event
//	idx_state    state 0x00 created seq id → 1 byte: 1 claimed, 0 free
//	idx_created  created seq id → empty
//	idx_claim    created seq id → empty, claimed cards only
//	idx_lease    lease-until id → empty, claimed cards with a lease only
//	idx_deps     blocker 0x00 dependent → empty
//
// "created" is the card's created_at in sortable nanoseconds and "seq" its
// creation sequence, which breaks ties between cards created in the same
// instant so creation order is total. Card ids and state names cannot
// contain 0x00 (board.ValidateName refuses control characters), so the
// separator is unambiguous. Indexes are written in the same transaction as
// the card, through one function (putCard), so they cannot drift.
//
// Writes go through a group committer (see commit.go): concurrent writers
// share one transaction and one fsync, and each write is isolated from the
// others in its batch by a per-write overlay, so a refused write leaves
// nothing behind.
package boltstore
