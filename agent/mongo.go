package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
	"github.com/leasekeeper/leasekeeper/store/mongo/connstr"
	"github.com/leasekeeper/leasekeeper/storespec"
)

// MongoConnectTimeout bounds connecting to MongoDB at start, so an agent
// pointed at an unreachable server fails with a clear error instead of
// hanging before it ever serves.
const MongoConnectTimeout = 30 * time.Second

func openMongo(ctx context.Context, spec storespec.Spec, clock board.Clock) (board.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, MongoConnectTimeout)
	defer cancel()
	s, err := mongostore.Open(ctx, mongostore.Options{
		URI:             spec.URI,
		Database:        spec.Database,
		Board:           spec.Board,
		Clock:           clock,
		Lease:           spec.Lease,
		UnleasedHorizon: spec.UnleasedHorizon,
	})
	if err != nil {
		return nil, fmt.Errorf("open mongo store %s/%s: %w", connstr.Redact(spec.URI), spec.Database, err)
	}
	return s, nil
}
