package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/leasekeeper/leasekeeper/board"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// A store plugin child leaves its store's log counters (writes, syncs)
// beside the board file when it exits, so the report can show how many
// durable writes one fsync carried on the path as shipped.

func walStatsFile(boardFile string) string { return boardFile + ".walstats" }

func writeWALStats(boardFile string, st boltstore.Stats) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return os.WriteFile(walStatsFile(boardFile), b, 0o644)
}

func readWALStats(boardFile string) (boltstore.Stats, error) {
	var st boltstore.Stats
	b, err := os.ReadFile(walStatsFile(boardFile))
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// storeWALStats reads the counters of an in-process bbolt store.
func storeWALStats(s board.Store) func() (boltstore.Stats, error) {
	return func() (boltstore.Stats, error) {
		bs, ok := s.(*boltstore.Store)
		if !ok {
			return boltstore.Stats{}, fmt.Errorf("store is a %T, not a bbolt store in this process", s)
		}
		return bs.Stats(), nil
	}
}

// perSync says how many writes one log sync carried.
func perSync(st boltstore.Stats) string {
	if st.Syncs == 0 {
		return "no log syncs"
	}
	return fmt.Sprintf("%s durable writes per fsync (%d writes in %d log syncs)", num(float64(st.Writes)/float64(st.Syncs)), st.Writes, st.Syncs)
}
