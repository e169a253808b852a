package plugins

import (
	"github.com/leasekeeper/leasekeeper/board"
)

// The board.Store verbs of Proxy are its embedded verbs, through the
// supervisor: each one fails fast while the plugin is down, and otherwise
// is one RPC to the running plugin carrying the caller's ctx. Only the
// traits, which have no context, are the Proxy's own.

// Traits are what the plugin declared at its handshake (its first Board
// reply); a restarted plugin declares them again.
func (p *Proxy) Traits() board.Traits {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.traits
}
