package agent

import (
	"context"
	"fmt"

	"github.com/leasekeeper/leasekeeper/board"
)

func openMongo(_ context.Context, _ StoreSpec, _ board.Clock) (board.Store, error) {
	return nil, fmt.Errorf("%w: store.backend mongo is not available in this build", ErrConfig)
}
