package client

import "time"

// SetWaitHooks sets c's wait backstop and a hook run between a wait's
// first try and its follow of the event log, where a test injects the
// event the follow must not miss (DESIGN.md#waiting).
func SetWaitHooks(c *Client, afterTry func(), backstop time.Duration) {
	c.waitAfterTry = afterTry
	c.waitBackstop = backstop
}
