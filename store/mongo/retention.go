package mongostore

import (
	"context"

	"github.com/leasekeeper/leasekeeper/board"
)

// errNoRetention is this twin's answer to the retention verbs: not built
// yet (DESIGN.md#retention says what it would take). It is an invalid
// argument, so it crosses the plugin boundary and the socket with its
// identity and its words, and the agent's pruner says it once and stops.
func errNoRetention(verb string) error {
	return board.Invalid("%s: the MongoDB store does not implement retention yet (DESIGN.md#retention); nothing was deleted", verb)
}

// Prune is not implemented on the fleet twin yet.
func (s *Store) Prune(ctx context.Context, p board.PruneParams) (board.PruneResult, error) {
	if err := p.Validate(); err != nil {
		return board.PruneResult{}, err
	}
	return board.PruneResult{}, errNoRetention("prune")
}

// DeleteCard is not implemented on the fleet twin yet.
func (s *Store) DeleteCard(ctx context.Context, p board.DeleteCardParams) (board.DeleteCardResult, error) {
	if err := p.Validate(); err != nil {
		return board.DeleteCardResult{}, err
	}
	return board.DeleteCardResult{}, errNoRetention("delete card")
}
