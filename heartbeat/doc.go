// Package heartbeat keeps every claim an agent holds alive: one loop renews
// all of them every lease/3 in ONE batched store write (DESIGN.md#heartbeat-batch), and
// declares a claim lost — to the worker, through OnLost — the moment the
// agent can no longer vouch for it.
//
// # Trusted deadline
//
// A renewal confirms a lease that the store stamped at some instant after
// the attempt started, so the holder may trust the claim until
//
//	start of the confirming ATTEMPT + lease − margin
//
// and not a moment longer (the leader-lease rule of River's elector). The
// attempt start, not the reply's arrival, is what counts: a reply that took
// ten seconds says nothing about the ten seconds it spent in flight. The
// margin absorbs clock-rate drift between this host and the store. Past the
// trusted deadline with no confirmed renewal, the claim is declared lost
// (LostUnconfirmed) and no longer renewed: the watchdog's orphan proof
// "the owner's lease expired longer ago than the grace" is only sound
// because every holder stops on its own by then (DESIGN.md#client-deadline).
//
// Deadlines are computed from the injected board.Clock with time.Time
// arithmetic only (Add, Sub, Before). board.SystemClock returns time.Now(),
// whose values carry Go's monotonic reading, and that arithmetic keeps and
// compares the monotonic reading, so a wall-clock step on this host moves no
// deadline. Nothing here strips it (no Round(0), UTC, In or serialisation).
// A manual test clock returns wall-only values, which is exactly what lets a
// test move time by hand.
//
// # Owners
//
// Every claim is renewed on behalf of an owner. In pid mode the loop probes
// the owner's pid and start time before renewing: a provably dead owner's
// claims are expired at once through the owner's own fenced write
// (ExpireClaimOwned), so the watchdog need not wait out the TTL, and
// reported lost (LostOwnerDead). An Unknown probe keeps renewing: conserve
// on doubt. In keepalive mode the owner's client must ping; a claim whose
// owner has not pinged within the keepalive window is reported lost
// (LostKeepaliveMissed) and no longer renewed, but not expired: a silent
// owner is not a dead one, and its lease runs out on its own, never before
// the deadline its last ping was given. The claim is marked given up in the
// store instead (DisownClaimOwned), so an agent restarted before the lease
// ends does not adopt it again.
//
// # Disowned claims
//
// A claim declared lost for a reason that may leave the store still naming
// its token (unconfirmed, owner dead, keepalive missed) is remembered, one
// per card, until the card is tracked again or released: Disowned reports
// it, and the boot sweep adds the claims it would not adopt through Disown.
// The store's Claim is idempotent for one marker, so without this the
// holder's next claim of the card would get the lost token back; the socket
// API re-acquires such a card afresh instead, at a higher epoch. Add
// refuses the remembered token itself (ErrDisownedToken): a re-claim that
// raced the loss got it back from the store, and it is handed back too.
package heartbeat
