package boltstore

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/board"
)

// fakeClock is a settable board.Clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 9, 2, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// openTest opens a store in a fresh temp dir with a fake clock.
func openTest(t testing.TB) (*Store, *fakeClock, string) {
	t.Helper()
	clock := newFakeClock()
	path := filepath.Join(t.TempDir(), "board.db")
	s, err := Open(path, Options{Clock: clock})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, clock, path
}

// dump renders every bucket (keys, values and the bucket sequence) so a
// test can assert that a refused call wrote nothing at all.
func dump(t *testing.T, s *Store) string {
	t.Helper()
	var buf bytes.Buffer
	err := settled(t, s).View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			fmt.Fprintf(&buf, "[%s seq=%d]\n", name, b.Sequence())
			return b.ForEach(func(k, v []byte) error {
				if walBookkeeping(name, k) {
					return nil
				}
				fmt.Fprintf(&buf, "%q=%q\n", k, v)
				return nil
			})
		})
	})
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	return buf.String()
}

// checkIndexes recomputes every index from the cards and claims buckets and
// compares it with the index buckets, entry by entry and value by value. It
// also refuses a claim record whose card does not exist.
func checkIndexes(t *testing.T, s *Store) {
	t.Helper()
	err := settled(t, s).View(func(tx *bolt.Tx) error {
		want := map[string]map[string]string{}
		for _, b := range indexBuckets {
			want[string(b)] = map[string]string{}
		}
		claims := tx.Bucket(bucketClaims)
		err := claims.ForEach(func(k, _ []byte) error {
			if tx.Bucket(bucketCards).Get(k) == nil {
				return fmt.Errorf("claim record %q has no card", k)
			}
			return nil
		})
		if err != nil {
			return err
		}
		err = tx.Bucket(bucketCards).ForEach(func(k, v []byte) error {
			r, err := decodeCard(v, claims.Get(k))
			if err != nil {
				return err
			}
			if r.ID != string(k) {
				return fmt.Errorf("card key %q holds card %q", k, r.ID)
			}
			for _, e := range indexEntries(r) {
				want[string(e.bucket)][string(e.key)] = string(e.value)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, b := range indexBuckets {
			got := map[string]string{}
			_ = tx.Bucket(b).ForEach(func(k, v []byte) error {
				got[string(k)] = string(v)
				return nil
			})
			var problems []string
			for k, v := range want[string(b)] {
				if gv, ok := got[k]; !ok {
					problems = append(problems, fmt.Sprintf("missing %q", k))
				} else if gv != v {
					problems = append(problems, fmt.Sprintf("%q = %q, want %q", k, gv, v))
				}
			}
			for k := range got {
				if _, ok := want[string(b)][k]; !ok {
					problems = append(problems, fmt.Sprintf("stale %q", k))
				}
			}
			sort.Strings(problems)
			if len(problems) > 0 {
				return fmt.Errorf("index %s inconsistent: %v", b, problems)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// allCards reads every card straight from the cards and claims buckets
// (the brute-force answer the index-backed listings are compared with).
func allCards(t *testing.T, s *Store) []*cardRecord {
	t.Helper()
	var out []*cardRecord
	err := settled(t, s).View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCards).ForEach(func(k, v []byte) error {
			r, err := decodeCard(v, tx.Bucket(bucketClaims).Get(k))
			out = append(out, r)
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	sortByCreation(out)
	return out
}

func mustCreate(t testing.TB, s *Store, nc board.CreateCardParams) board.Card {
	t.Helper()
	c, err := s.CreateCard(t.Context(), nc)
	if err != nil {
		t.Fatalf("CreateCard(%q): %v", nc.ID, err)
	}
	return c
}

const lease = 30 * time.Second

func mustClaim(t testing.TB, s *Store, card, marker string) board.ClaimToken {
	t.Helper()
	got, err := s.Claim(t.Context(), board.ClaimParams{Card: card, Marker: marker, Lease: lease})
	tok := got.Token()
	if err != nil {
		t.Fatalf("Claim(%q, %q): %v", card, marker, err)
	}
	return tok
}

func ids(cs []board.Card) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

// settled writes everything the store acknowledged into the bbolt file and
// returns the file, for a test that reads it directly.
func settled(t testing.TB, s *Store) *bolt.DB {
	t.Helper()
	if s.c == nil {
		return s.db // a raw file, no store around it
	}
	if err := s.checkpointNow(); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	return s.db
}

// walBookkeeping says whether a key of the file is the log's bookkeeping
// (which checkpoint it holds through, whether it was closed cleanly, which
// log it pairs with) rather than board data a verb writes.
func walBookkeeping(bucket, key []byte) bool {
	return bytes.Equal(bucket, bucketMeta) &&
		(bytes.Equal(key, keyWALApplied) || bytes.Equal(key, keyWALClean) || bytes.Equal(key, keyWALID))
}
