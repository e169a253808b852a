// Package board is leasekeeper's domain: cards on a board of states, the
// fenced claim lease that grants a worker exclusive ownership of a card, runs,
// the audit event log, and the Store contract every storage backend honours.
//
// The model (DESIGN.md#claim-family):
//
//   - A claim is a marker on a card naming its holder. Every fresh acquisition
//     bumps the card's epoch; the pair {marker, epoch} is the ClaimToken.
//   - The claim carries a lease (claim_lease_until) that the holder's agent
//     renews every lease/3. An expired lease is positive evidence the holder
//     stopped heartbeating, and the watchdog may transfer the claim.
//   - Every owner write is a compare-and-set on (claim, claim_epoch), so a
//     superseded holder's late write is refused instead of clobbering the new
//     owner (DESIGN.md#fence).
//   - Terminal states are sinks: only Reopen leaves them (DESIGN.md#sinks).
//
// The conformance suite every Store must pass lives in package boardtest.
package board
