package heartbeat

import "errors"

// ErrInvalidConfig: New refused the Config.
var ErrInvalidConfig = errors.New("heartbeat: invalid config")

// ErrInvalidClaim: Add refused the claim (zero token, no card, no attempt
// start). Nothing was tracked.
var ErrInvalidClaim = errors.New("heartbeat: invalid claim")

// ErrDisownedToken: Add refused the claim because it is the very token the
// loop gave up on for that card (Disowned): the store's same-marker Claim
// handed it back to a re-claim that raced the loss. Nothing was tracked;
// the caller hands the claim back and claims afresh (DESIGN.md#keepalive).
var ErrDisownedToken = errors.New("heartbeat: the claim is a token this agent gave up on")

// ErrBadBatch: the store answered a batch with a result list that does not
// match the holds it was given. Nothing in that batch counts as renewed.
var ErrBadBatch = errors.New("heartbeat: renewal results do not match the batch")
