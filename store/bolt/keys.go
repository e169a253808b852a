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
	bucketClaims     = []byte("claims")
	bucketRuns       = []byte("runs")
	bucketEvents     = []byte("events")
	bucketIdxState   = []byte("idx_state")
	bucketIdxCreated = []byte("idx_created")
	bucketIdxClaim   = []byte("idx_claim")
	bucketIdxLease   = []byte("idx_lease")
	bucketIdxDeps    = []byte("idx_deps")
	// bucketIdxRecovery holds the cards whose claim is a recovery marker
	// (since schema 3): the recovery sweep's population, read every pass.
	bucketIdxRecovery = []byte("idx_recovery")
	// bucketIdxLabel holds each card once per label it carries, keyed
	// label, state, creation order (since schema 5): the queue of one
	// label, for ClaimNext routed by labels (DESIGN.md#label-routing).
	bucketIdxLabel = []byte("idx_label")

	// allBuckets is what a current-schema file holds; Open creates the
	// missing ones only on a file it has just stamped.
	allBuckets = [][]byte{
		bucketMeta, bucketCards, bucketClaims, bucketRuns, bucketEvents,
		bucketIdxState, bucketIdxCreated, bucketIdxClaim, bucketIdxLease, bucketIdxDeps,
		bucketIdxRecovery, bucketIdxLabel,
	}
	// indexBuckets are derived entirely from the cards and claims buckets.
	indexBuckets = [][]byte{bucketIdxState, bucketIdxCreated, bucketIdxClaim, bucketIdxLease, bucketIdxDeps, bucketIdxRecovery, bucketIdxLabel}
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

// cardRecord is a whole card as the store works with it: the card document
// from the cards bucket, with the claim family merged in from the claims
// bucket, plus the card's creation sequence, which orders cards created in
// the same instant.
type cardRecord struct {
	board.Card
	Seq uint64 `json:"seq"`
}

// cardDoc is the JSON document the cards bucket stores since schema 2:
// every card field except the claim family, which lives in the claims
// bucket. The four shadow fields sit one level shallower than the
// embedded card's claim fields, so encoding/json resolves those names to
// them; they are always nil and omitted, which keeps the family out of the
// document. A document that still carries a claim field (a schema 1 record)
// fails to decode into them instead of being silently half-read.
type cardDoc struct {
	*board.Card
	Seq uint64 `json:"seq"`

	ShadowClaim           *struct{} `json:"claim,omitempty"`
	ShadowClaimEpoch      *struct{} `json:"claim_epoch,omitempty"`
	ShadowClaimedAt       *struct{} `json:"claimed_at,omitempty"`
	ShadowClaimLeaseUntil *struct{} `json:"claim_lease_until,omitempty"`
}

// encodeCardDoc encodes the card document of r (no claim family).
func encodeCardDoc(r *cardRecord) ([]byte, error) {
	return json.Marshal(cardDoc{Card: &r.Card, Seq: r.Seq})
}

// decodeCardDoc decodes a card document. The claim family is left zero:
// the caller merges it from the claims bucket.
func decodeCardDoc(v []byte) (*cardRecord, error) {
	var r cardRecord
	d := cardDoc{Card: &r.Card}
	if err := json.Unmarshal(v, &d); err != nil {
		return nil, fmt.Errorf("decode card record: %w", err)
	}
	r.Seq = d.Seq
	normalizeCard(&r.Card)
	return &r, nil
}

// decodeCard builds a whole card from its document and its claim record
// (nil when the card was never claimed).
func decodeCard(doc, claim []byte) (*cardRecord, error) {
	r, err := decodeCardDoc(doc)
	if err != nil {
		return nil, err
	}
	if claim != nil {
		f, err := decodeClaim(claim)
		if err != nil {
			return nil, fmt.Errorf("card %q: %w", r.ID, err)
		}
		f.apply(&r.Card)
	}
	return r, nil
}

// claimFamily is the claim family of a card: the fields a heartbeat, a
// claim and a release change, and nothing else does.
type claimFamily struct {
	Marker     string
	Epoch      int64
	ClaimedAt  time.Time
	LeaseUntil time.Time
}

func familyOf(c *board.Card) claimFamily {
	return claimFamily{Marker: c.Claim, Epoch: c.ClaimEpoch, ClaimedAt: c.ClaimedAt, LeaseUntil: c.ClaimLeaseUntil}
}

func (f claimFamily) apply(c *board.Card) {
	c.Claim, c.ClaimEpoch, c.ClaimedAt, c.ClaimLeaseUntil = f.Marker, f.Epoch, f.ClaimedAt, f.LeaseUntil
}

func (f claimFamily) isZero() bool {
	return f.Marker == "" && f.Epoch == 0 && f.ClaimedAt.IsZero() && f.LeaseUntil.IsZero()
}

func (f claimFamily) equal(g claimFamily) bool {
	return f.Marker == g.Marker && f.Epoch == g.Epoch && f.ClaimedAt.Equal(g.ClaimedAt) && f.LeaseUntil.Equal(g.LeaseUntil)
}

// The claims bucket maps a card id to a fixed-layout binary record, so a
// renewal reads and rewrites a few dozen bytes instead of decoding and
// encoding the whole card (a 10,000-claim heartbeat tick):
//
//	[0]      record format, claimFormat
//	[1:9]    claim_epoch, int64 big-endian
//	[9:17]   claimed_at, Unix seconds, int64 big-endian
//	[17:21]  claimed_at, nanoseconds within the second, uint32 big-endian
//	[21:29]  claim_lease_until, Unix seconds
//	[29:33]  claim_lease_until, nanoseconds
//	[33:]    claim marker (empty when the card is free)
//
// Seconds plus nanoseconds round-trip every time.Time exactly, the zero
// time included (a zero lease means a legacy claim, so it must survive). A
// card that was never claimed has no record; a released card keeps one,
// with an empty marker, because its epoch must never go back (DESIGN.md#epoch-monotone).
const (
	claimFormat    = 1
	claimOffEpoch  = 1
	claimOffAt     = 9
	claimOffLease  = 21
	claimHeaderLen = 33
)

func putTime(b []byte, t time.Time) {
	binary.BigEndian.PutUint64(b, uint64(t.Unix()))
	binary.BigEndian.PutUint32(b[8:], uint32(t.Nanosecond()))
}

func getTime(b []byte) (time.Time, error) {
	nsec := binary.BigEndian.Uint32(b[8:])
	if nsec >= 1e9 {
		return time.Time{}, fmt.Errorf("claim record: nanoseconds %d out of range", nsec)
	}
	return time.Unix(int64(binary.BigEndian.Uint64(b)), int64(nsec)).UTC(), nil
}

// appendClaim appends the record of f to dst.
func appendClaim(dst []byte, f claimFamily) []byte {
	var h [claimHeaderLen]byte
	h[0] = claimFormat
	binary.BigEndian.PutUint64(h[claimOffEpoch:], uint64(f.Epoch))
	putTime(h[claimOffAt:], f.ClaimedAt)
	putTime(h[claimOffLease:], f.LeaseUntil)
	dst = append(dst, h[:]...)
	return append(dst, f.Marker...)
}

// checkClaim validates the fixed part of a claim record.
func checkClaim(b []byte) error {
	if len(b) < claimHeaderLen {
		return fmt.Errorf("claim record is %d bytes, shorter than its %d-byte header", len(b), claimHeaderLen)
	}
	if b[0] != claimFormat {
		return fmt.Errorf("claim record format %d, want %d", b[0], claimFormat)
	}
	return nil
}

func claimEpoch(b []byte) int64 { return int64(binary.BigEndian.Uint64(b[claimOffEpoch:])) }

func claimMarker(b []byte) []byte { return b[claimHeaderLen:] }

func decodeClaim(b []byte) (claimFamily, error) {
	if err := checkClaim(b); err != nil {
		return claimFamily{}, err
	}
	at, err := getTime(b[claimOffAt:])
	if err != nil {
		return claimFamily{}, err
	}
	until, err := getTime(b[claimOffLease:])
	if err != nil {
		return claimFamily{}, err
	}
	return claimFamily{
		Marker:     string(claimMarker(b)),
		Epoch:      claimEpoch(b),
		ClaimedAt:  at,
		LeaseUntil: until,
	}, nil
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

// labelKey is a card's key in idx_label for one of its labels: the label,
// then its state key. Labels hold no control characters
// (board.NormalizeLabels), so sep ends the label.
func labelKey(label, state string, order []byte) []byte {
	k := make([]byte, 0, len(label)+1+len(state)+1+len(order))
	k = append(k, label...)
	k = append(k, sep)
	return append(k, stateKey(state, order)...)
}

// labelStatePrefix is the prefix of the cards in state carrying label.
func labelStatePrefix(label, state string) []byte { return labelKey(label, state, nil) }

func leaseKey(until time.Time, id string) []byte {
	return appendLeaseKey(make([]byte, 0, 8+len(id)), until, id)
}

func appendLeaseKey(dst []byte, until time.Time, id string) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(until.UnixNano())^(1<<63))
	return append(dst, id...)
}

// leaseKeyString is leaseKey as the overlay's map key, built on the stack
// for ordinary ids so the string is the only allocation.
func leaseKeyString(until time.Time, id string) string {
	var b [64]byte
	return string(appendLeaseKey(b[:0], until, id))
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
	for _, l := range r.Labels {
		out = append(out, indexEntry{bucketIdxLabel, labelKey(l, r.State, order), stateVal})
	}
	if r.Claimed() {
		out = append(out, indexEntry{bucketIdxClaim, order, emptyValue})
	}
	if board.IsRecoveryMarker(r.Claim) {
		out = append(out, indexEntry{bucketIdxRecovery, order, emptyValue})
	}
	if key, ok := leaseEntry(r.ID, familyOf(&r.Card)); ok {
		out = append(out, indexEntry{bucketIdxLease, key, emptyValue})
	}
	for _, b := range r.DependsOn {
		out = append(out, indexEntry{bucketIdxDeps, depKey(b, r.ID), emptyValue})
	}
	return out
}

// leaseEntry is the card's key in the lease index, if it has one: claimed
// cards with a lease only. A legacy claim (no lease) is never reaped by time
// (DESIGN.md#legacy-claims), so it stays out. A renewal changes this entry and
// no other index entry.
func leaseEntry(id string, f claimFamily) ([]byte, bool) {
	if f.Marker == "" || f.LeaseUntil.IsZero() {
		return nil, false
	}
	return leaseKey(f.LeaseUntil, id), true
}

func sameEntry(a, b indexEntry) bool {
	return bytes.Equal(a.bucket, b.bucket) && bytes.Equal(a.key, b.key)
}
