package heartbeat

import "errors"

// ErrInvalidConfig: New refused the Config.
var ErrInvalidConfig = errors.New("heartbeat: invalid config")

// ErrInvalidClaim: Add refused the claim (zero token, no card, no attempt
// start). Nothing was tracked.
var ErrInvalidClaim = errors.New("heartbeat: invalid claim")

// ErrBadBatch: the store answered a batch with a result list that does not
// match the holds it was given. Nothing in that batch counts as renewed.
var ErrBadBatch = errors.New("heartbeat: renewal results do not match the batch")
