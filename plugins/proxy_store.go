package plugins

import (
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// The board.Store verbs of Proxy are its embedded verbs, through the
// supervisor: each one fails fast while the plugin is down, and otherwise
// is one RPC to the running plugin carrying the caller's ctx. Only the
// board and the traits, which have no context, are the Proxy's own.

// Board returns the board the plugin serves, as last read (at its start,
// or by a LoadBoard or SetBoard through this Proxy; a stale one is re-read
// in the background, see refreshBoard in admin.go).
func (p *Proxy) Board() board.Board {
	p.mu.Lock()
	b, stale := p.board, time.Since(p.boardAt) > boardRefresh
	p.mu.Unlock()
	p.refreshBoard(stale)
	return b
}

// Traits are what the plugin declared at its handshake (its first Board
// reply); a restarted plugin declares them again.
func (p *Proxy) Traits() board.Traits {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.traits
}
