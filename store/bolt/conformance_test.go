package boltstore_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// harness opens each test's store on its own real bbolt file.
var harness = boardtest.Harness{
	Open: func(t *testing.T, cfg boardtest.Config) board.Store {
		t.Helper()
		s, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{
			Board:       cfg.Board,
			Clock:       cfg.Clock,
			LockTimeout: 5 * time.Second,
		})
		if err != nil {
			t.Fatalf("boltstore.Open: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	},
}

func TestConformance(t *testing.T) {
	boardtest.Exercise(t, harness)
}

func TestStressFencing(t *testing.T) {
	o := boardtest.StressOptions{Cards: 3, Workers: 16, Duration: 5 * time.Second, Ops: 6000}
	if testing.Short() {
		o.Duration, o.Ops = time.Second, 400
	}
	boardtest.StressFencing(t, harness, o)
}
