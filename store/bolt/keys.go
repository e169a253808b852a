package boltstore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

var (
	bucketMeta       = []byte("meta")
	bucketCards      = []byte("cards")
	bucketRuns       = []byte("runs")
	bucketEvents     = []byte("events")
	bucketIdxState   = []byte("idx_state")
	bucketIdxCreated = []byte("idx_created")
	bucketIdxClaim   = []byte("idx_claim")
	bucketIdxLease   = []byte("idx_lease")
	bucketIdxDeps    = []byte("idx_deps")

	// allBuckets is what a current-schema file holds; Open creates the
	// missing ones only on a file it has just stamped.
	allBuckets = [][]byte{
		bucketMeta, bucketCards, bucketRuns, bucketEvents,
		bucketIdxState, bucketIdxCreated, bucketIdxClaim, bucketIdxLease, bucketIdxDeps,
	}
	// indexBuckets are derived entirely from the cards bucket.
	indexBuckets = [][]byte{bucketIdxState, bucketIdxCreated, bucketIdxClaim, bucketIdxLease, bucketIdxDeps}
)

// sep separates variable-length parts of an index key. Ids and state names
// never contain it (board.ValidateName refuses control characters).
const sep = 0x00

// Values of idx_state entries, so ClaimNext can skip claimed cards without
// decoding them (in_progress is a pool state here and mostly claimed).
var (
	stateFree    = []byte{0}
	stateClaimed = []byte{1}
	emptyValue   = []byte{}
)

// cardRecord is what the cards bucket stores: the card plus its creation
// sequence, which orders cards created in the same instant.
type cardRecord struct {
	board.Card
	Seq uint64 `json:"seq"`
}

func decodeCard(v []byte) (*cardRecord, error) {
	var r cardRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("decode card record: %w", err)
	}
	normalizeCard(&r.Card)
	return &r, nil
}

func decodeRun(v []byte) (*board.Run, error) {
	var r board.Run
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("decode run: %w", err)
	}
	return &r, nil
}

// normalizeCard makes the in-memory card equal to what a decode of its JSON
// yields, so a card returned by a write compares equal to the same card read
// back: non-nil empty slices and UTC times without a monotonic reading.
func normalizeCard(c *board.Card) {
	if c.Labels == nil {
		c.Labels = []string{}
	}
	if c.DependsOn == nil {
		c.DependsOn = []string{}
	}
	if c.Runs == nil {
		c.Runs = []string{}
	}
	c.CreatedAt = normTime(c.CreatedAt)
	c.UpdatedAt = normTime(c.UpdatedAt)
	c.ClaimedAt = normTime(c.ClaimedAt)
	c.ClaimLeaseUntil = normTime(c.ClaimLeaseUntil)
	if c.GaveUp != nil {
		c.GaveUp.At = normTime(c.GaveUp.At)
	}
}

// normTime drops the monotonic reading and the location. The zero time
// stays the zero time (UTC of a zero time is still IsZero).
func normTime(t time.Time) time.Time { return t.Round(0).UTC() }

// timeKey encodes t as 8 sortable bytes: UnixNano with the sign bit
// flipped, big-endian, so byte order is time order (before 1970 too).
func timeKey(t time.Time) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t.UnixNano())^(1<<63))
	return b[:]
}

func seqKey(n uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return b[:]
}

// orderKey is created|seq|id: the card's place in creation order.
func orderKey(r *cardRecord) []byte {
	k := make([]byte, 0, 16+len(r.ID))
	k = append(k, timeKey(r.CreatedAt)...)
	k = append(k, seqKey(r.Seq)...)
	return append(k, r.ID...)
}

// idFromOrderKey extracts the id from created|seq|id.
func idFromOrderKey(k []byte) string { return string(k[16:]) }

func stateKey(state string, order []byte) []byte {
	k := make([]byte, 0, len(state)+1+len(order))
	k = append(k, state...)
	k = append(k, sep)
	return append(k, order...)
}

func statePrefix(state string) []byte { return append([]byte(state), sep) }

func leaseKey(until time.Time, id string) []byte {
	return append(timeKey(until), id...)
}

func depKey(blocker, dependent string) []byte {
	k := make([]byte, 0, len(blocker)+1+len(dependent))
	k = append(k, blocker...)
	k = append(k, sep)
	return append(k, dependent...)
}

func depPrefix(blocker string) []byte { return append([]byte(blocker), sep) }

// indexEntry is one key of one index bucket with its value.
type indexEntry struct {
	bucket []byte
	key    []byte
	value  []byte
}

// indexEntries derives every index entry of a card. It is the single
// definition of the indexes: putCard writes from it and the consistency
// check in the tests compares the buckets against it.
func indexEntries(r *cardRecord) []indexEntry {
	order := orderKey(r)
	stateVal := stateFree
	if r.Claimed() {
		stateVal = stateClaimed
	}
	out := []indexEntry{
		{bucketIdxState, stateKey(r.State, order), stateVal},
		{bucketIdxCreated, order, emptyValue},
	}
	if r.Claimed() {
		out = append(out, indexEntry{bucketIdxClaim, order, emptyValue})
		// A legacy claim (no lease) is never reaped by time (ADR-096
		// Consequences), so it stays out of the lease index.
		if !r.ClaimLeaseUntil.IsZero() {
			out = append(out, indexEntry{bucketIdxLease, leaseKey(r.ClaimLeaseUntil, r.ID), emptyValue})
		}
	}
	for _, b := range r.DependsOn {
		out = append(out, indexEntry{bucketIdxDeps, depKey(b, r.ID), emptyValue})
	}
	return out
}

func sameEntry(a, b indexEntry) bool {
	return bytes.Equal(a.bucket, b.bucket) && bytes.Equal(a.key, b.key)
}
