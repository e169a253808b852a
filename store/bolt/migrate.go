package boltstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/board"
)

// migrate brings a file from schema version from up to SchemaVersion inside
// tx, one step per version, and stamps the result. It runs inside Open's
// write transaction, so a failure (or a crash) leaves the file exactly as
// it was, still stamped with its old version.
func migrate(tx *bolt.Tx, from int) error {
	for v := from; v < SchemaVersion; v++ {
		step, ok := migrations[v]
		if !ok {
			return fmt.Errorf("no migration from schema version %d", v)
		}
		if err := step(tx); err != nil {
			return fmt.Errorf("from version %d: %w", v, err)
		}
	}
	return tx.Bucket(bucketMeta).Put(keySchema, []byte(strconv.Itoa(SchemaVersion)))
}

// migrations maps a schema version to the step that lifts a file from it to
// the next version.
var migrations = map[int]func(*bolt.Tx) error{
	1: migrate1to2,
	2: migrate2to3,
	3: migrate3to4,
	4: migrate4to5,
}

// keyLabelIndexPending (meta bucket): idx_label is still to be built. The
// step from schema 4 sets it in the transaction that stamps the file, and
// the open that follows builds the index (buildLabelIndex) once the log's
// records are in the file: records an older binary logged carry no entries
// for an index it did not know.
var keyLabelIndexPending = []byte("idx_label_pending")

// migrate4to5 adds the empty idx_label bucket and marks it to be built.
func migrate4to5(tx *bolt.Tx) error {
	if tx.Bucket(bucketIdxLabel) != nil {
		return fmt.Errorf("a version 4 file already has a %s bucket", bucketIdxLabel)
	}
	if _, err := tx.CreateBucket(bucketIdxLabel); err != nil {
		return err
	}
	return tx.Bucket(bucketMeta).Put(keyLabelIndexPending, []byte{1})
}

// buildLabelIndex fills idx_label from the cards and claims buckets when a
// migration left it pending, and clears the mark, in tx. Every other
// bucket is only read.
func buildLabelIndex(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta.Get(keyLabelIndexPending) == nil {
		return nil
	}
	idx, cards, claims := tx.Bucket(bucketIdxLabel), tx.Bucket(bucketCards), tx.Bucket(bucketClaims)
	err := cards.ForEach(func(k, v []byte) error {
		r, err := decodeCard(v, claims.Get(k))
		if err != nil {
			return fmt.Errorf("card %q: %w", k, err)
		}
		// indexEntries stays the one definition of every index.
		for _, e := range indexEntries(r) {
			if bytes.Equal(e.bucket, bucketIdxLabel) {
				if err := idx.Put(e.key, e.value); err != nil {
					return fmt.Errorf("card %q: %w", k, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("build %s: %w", bucketIdxLabel, err)
	}
	return meta.Delete(keyLabelIndexPending)
}

// migrate3to4 changes no data: a version 4 file has a write-ahead log
// beside it, which Open creates (openLog) once the file is stamped.
func migrate3to4(*bolt.Tx) error { return nil }

// v1CardRecord is a card as schema version 1 stored it: one JSON document
// with the claim family inline.
type v1CardRecord struct {
	board.Card
	Seq uint64 `json:"seq"`
}

// migrate1to2 moves each card's claim family out of its JSON document into
// a claim record in the new claims bucket. Every value is carried over
// as it was, the epoch above all: a fence that went back would let a stale
// holder's token match again (DESIGN.md#epoch-monotone). The indexes are derived from
// the same fields in both versions, so they stay as they are.
func migrate1to2(tx *bolt.Tx) error {
	cards := tx.Bucket(bucketCards)
	if cards == nil {
		return fmt.Errorf("missing bucket %s", bucketCards)
	}
	if tx.Bucket(bucketClaims) != nil {
		return fmt.Errorf("a version 1 file already has a %s bucket", bucketClaims)
	}
	claims, err := tx.CreateBucket(bucketClaims)
	if err != nil {
		return err
	}
	// bbolt does not allow writes to a bucket while a cursor walks it, so
	// the new values are gathered first and written after the walk.
	type rewrite struct{ key, doc, claim []byte }
	var todo []rewrite
	err = cards.ForEach(func(k, v []byte) error {
		var old v1CardRecord
		if err := json.Unmarshal(v, &old); err != nil {
			return fmt.Errorf("card %q: decode version 1 record: %w", k, err)
		}
		if old.ID != string(k) {
			return fmt.Errorf("card key %q holds card %q", k, old.ID)
		}
		rec := &cardRecord{Card: old.Card, Seq: old.Seq}
		normalizeCard(&rec.Card)
		doc, err := encodeCardDoc(rec)
		if err != nil {
			return fmt.Errorf("card %q: %w", k, err)
		}
		r := rewrite{key: append([]byte(nil), k...), doc: doc}
		if fam := familyOf(&rec.Card); !fam.isZero() {
			r.claim = appendClaim(nil, fam)
		}
		todo = append(todo, r)
		return nil
	})
	if err != nil {
		return err
	}
	for _, r := range todo {
		if err := cards.Put(r.key, r.doc); err != nil {
			return fmt.Errorf("card %q: %w", r.key, err)
		}
		if r.claim != nil {
			if err := claims.Put(r.key, r.claim); err != nil {
				return fmt.Errorf("card %q: claim record: %w", r.key, err)
			}
		}
	}
	return nil
}

// migrate2to3 builds idx_recovery, the index of cards held by a recovery
// claim, from the claim records: the recovery sweep lists it on every pass
// instead of reading every expired claim (DESIGN.md#recovery-sweep). It only adds the
// new bucket. The claim records, the epochs above all, and every other
// bucket are left exactly as they were; the card documents are only read,
// for the creation order the index is keyed by.
func migrate2to3(tx *bolt.Tx) error {
	cards, claims := tx.Bucket(bucketCards), tx.Bucket(bucketClaims)
	if cards == nil || claims == nil {
		return fmt.Errorf("a version 2 file is missing bucket %s or %s", bucketCards, bucketClaims)
	}
	if tx.Bucket(bucketIdxRecovery) != nil {
		return fmt.Errorf("a version 2 file already has a %s bucket", bucketIdxRecovery)
	}
	idx, err := tx.CreateBucket(bucketIdxRecovery)
	if err != nil {
		return err
	}
	// The walk reads claims and cards and writes only the new bucket, so
	// it may write as it goes.
	return claims.ForEach(func(k, v []byte) error {
		if err := checkClaim(v); err != nil {
			return fmt.Errorf("card %q: %w", k, err)
		}
		if !board.IsRecoveryMarker(string(claimMarker(v))) {
			return nil
		}
		doc := cards.Get(k)
		if doc == nil {
			return fmt.Errorf("claim record %q has no card", k)
		}
		r, err := decodeCard(doc, v)
		if err != nil {
			return fmt.Errorf("card %q: %w", k, err)
		}
		if r.ID != string(k) {
			return fmt.Errorf("card key %q holds card %q", k, r.ID)
		}
		// indexEntries stays the one definition of every index.
		for _, e := range indexEntries(r) {
			if bytes.Equal(e.bucket, bucketIdxRecovery) {
				if err := idx.Put(e.key, e.value); err != nil {
					return fmt.Errorf("card %q: %w", k, err)
				}
			}
		}
		return nil
	})
}
