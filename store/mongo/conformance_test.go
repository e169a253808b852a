package mongostore_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

func TestMain(m *testing.M) { os.Exit(mongotest.Main(m)) }

// harness opens each test's store on its own database of the test server
// (FerretDB behind the proxy that serializes each database's requests, or
// LEASEKEEPER_TEST_MONGO_URI).
var harness = boardtest.Harness{
	Fleet: true,
	Open: func(t *testing.T, cfg boardtest.Config) board.Store {
		t.Helper()
		return openStore(t, mongostore.Options{Board: cfg.Board, Clock: cfg.Clock})
	},
}

// openStore opens a store on a fresh database and closes it with the test.
func openStore(t testing.TB, opts mongostore.Options) *mongostore.Store {
	t.Helper()
	if opts.URI == "" {
		opts.URI = mongotest.URI(t)
	}
	if opts.Database == "" {
		opts.Database = mongotest.Database(t)
	}
	if opts.EventLag == 0 {
		// The test server applies one command at a time, so no write
		// becomes visible out of its stamp's order (Options.EventLag).
		opts.EventLag = -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := mongostore.Open(ctx, opts)
	if err != nil {
		t.Fatalf("mongostore.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// The suite, like the stress tests, opens a database of its own per test,
// so it runs alongside the package's other tests rather than before them.
func TestConformance(t *testing.T) {
	t.Parallel()
	boardtest.Exercise(t, harness)
}

func TestStressFencing(t *testing.T) {
	t.Parallel()
	o := boardtest.StressOptions{Cards: 3, Workers: 12, Duration: 5 * time.Second, Ops: 1500}
	if testing.Short() {
		o.Duration, o.Ops = 2*time.Second, 300
	}
	boardtest.StressFencing(t, harness, o)
}
