// Package mongostore is the fleet twin of board.Store: every agent of a
// fleet points at one MongoDB replica set (DESIGN.md#twins).
//
// It is written against what both MongoDB (4.4 and later) and FerretDB v1
// support, because the tests run on FerretDB: single-document updates with
// $set, $unset, $inc, $max, $min, $push/$each, $pop, $addToSet and
// $currentDate (a timestamp: the server's stamp of a write, see outbox.go),
// plain query filters (positional paths such as outbox.0.id included),
// upserts, unordered bulk inserts and compound and multikey indexes. It
// never uses aggregation pipeline updates, $$NOW, $expr, transactions,
// change streams, partial or TTL indexes, findAndModify projections, or
// $pull with a condition (FerretDB v1 matches whole values only).
//
// Collections:
//
//	cards     one document per card: the card's fields under their JSON
//	          names, created_seq (creation order: the server's timestamp
//	          of the insert), run (the card's current run, embedded; see
//	          runs.go), outbox and ev_ts (the events of the card's last
//	          write and the server's stamp of it, until published; see
//	          outbox.go), and reopen_pending,
//	          reopen_holds and reopen_gen (a Reopen racing a promotion;
//	          see reopen.go)
//	runs      archive copies of runs that are no longer a card's current
//	          run, and runs an older version wrote (with their outbox)
//	events    the event log: _id is the sequence number computed from
//	          the write's stamp (seqOf), key the outbox entry id (unique),
//	          so publishing an entry twice is harmless
//
// Where this twin deliberately differs from the bbolt one (DESIGN.md#twins) — read before "fixing" any of it:
//
//   - Time comes from the server. claimed_at, claim_lease_until,
//     updated_at, created_at and event times are the server's clock, read
//     from a hello reply at most a second old (aged by the monotonic
//     clock), with the round trip and the drift counted against every
//     comparison and in favour of the lease end a reused reading stamps
//     (a fresh one was read after its holder's attempt began), so a lease
//     outlasts its holder's deadline however slow the hello, and is
//     stretched no further than that takes. A fleet's agents do not
//     share a clock, and a pod with a fast clock must not mint itself
//     extra lease.
//   - The epoch is floored at the server clock: max(stored + 1, server ms).
//     Another binary's write can drop the field; a counter would then
//     restart at 1 and hand one worker the same token twice.
//   - A card with no claim_epoch field refuses every fenced write, even its
//     live holder's (DESIGN.md#lost-fence). Admitting it would admit every earlier
//     generation of the marker. The card stays recoverable through the
//     candidate listing's un-leased arm.
//   - Un-leased claims exist here (a foreign whole-document replace strips
//     the lease), so the candidate listing has an un-leased arm on a long
//     horizon and ListUnleasedRunningClaims returns them (DESIGN.md#unleased-sweep).
//   - No multi-document atomicity: every write changes one document. Its
//     events ride in that document's outbox, set by the same update and
//     stamped by the server, and are published to the event log later,
//     idempotently (DESIGN.md#event-log). A blocker's
//     completion and its dependents' promotions are separate writes (a
//     Finish that completes a card included), made to exclude a racing
//     Reopen by holds on the dependents (DESIGN.md#reopen-promotion).
//     Because a card's current
//     run is embedded in the card, Start, Finish and every run write are
//     still one fenced write; the archive copy of a run a new one
//     displaces, and the adoption of a run only the runs collection holds,
//     are idempotent steps before it. A run id is checked for uniqueness
//     before the write, not by an index: two Starts racing with one new
//     run id on two cards could both create it.
//   - Writes are scoped $set / $unset, never a whole-document replace, so a
//     write can never erase a field it did not mean to touch (DESIGN.md#twin-writes).
package mongostore
