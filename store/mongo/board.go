package mongostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/leasekeeper/leasekeeper/board"
)

// The board definition lives in the database, one document shared by every
// agent of the fleet (DESIGN.md#board-in-store: one board for the fleet). The first agent
// to open an empty database seeds it from its configuration; after that the
// stored definition wins, and an agent whose configuration disagrees is told
// so at start (board.Board.Diff) instead of silently diverging.
const (
	collMeta = "meta"
	boardID  = "board"

	// boardTTL is how long the store's own copy of the definition (what
	// its writes validate against) is trusted before a write re-reads it,
	// under the write's context. Another agent's state sweep changes the definition under
	// this one; the TTL bounds how long this agent keeps validating against
	// the old one. A name the cache does not know is re-read at once.
	boardTTL = 2 * time.Second
)

type stateDoc struct {
	Name         string `bson:"name"`
	Pool         bool   `bson:"pool,omitempty"`
	Launch       bool   `bson:"launch,omitempty"`
	Running      bool   `bson:"running,omitempty"`
	Terminal     bool   `bson:"terminal,omitempty"`
	Completion   bool   `bson:"completion,omitempty"`
	RetiringInto string `bson:"retiring_into,omitempty"`
}

type boardDoc struct {
	ID      string     `bson:"_id"`
	Version int64      `bson:"version"`
	States  []stateDoc `bson:"states"`
	// Retry is the board's default retry policy (DESIGN.md#retries);
	// absent from a board an older agent stored: the defaults.
	Retry *retryPolicyDoc `bson:"retry,omitempty"`
}

type retryPolicyDoc struct {
	MaxAttempts  int64 `bson:"max_attempts,omitempty"`
	BackoffNS    int64 `bson:"backoff_ns,omitempty"`
	BackoffMaxNS int64 `bson:"backoff_max_ns,omitempty"`
}

func toRetryDoc(b board.Board) *retryPolicyDoc {
	if b.Retry.IsZero() {
		return nil
	}
	return &retryPolicyDoc{MaxAttempts: int64(b.Retry.MaxAttempts), BackoffNS: int64(b.Retry.Backoff), BackoffMaxNS: int64(b.Retry.BackoffMax)}
}

func toStateDocs(b board.Board) []stateDoc {
	out := make([]stateDoc, len(b.States))
	for i, s := range b.States {
		out[i] = stateDoc(s)
	}
	return out
}

func (d boardDoc) board() board.Board {
	b := board.Board{States: make([]board.State, len(d.States))}
	for i, s := range d.States {
		b.States[i] = board.State(s)
	}
	if d.Retry != nil {
		b.Retry = board.RetryPolicy{MaxAttempts: int(d.Retry.MaxAttempts), Backoff: time.Duration(d.Retry.BackoffNS), BackoffMax: time.Duration(d.Retry.BackoffMaxNS)}
	}
	return b
}

// readBoard reads the stored definition and its version; found is false
// when none is stored yet.
func (s *Store) readBoard(ctx context.Context) (board.Board, int64, bool, error) {
	var d boardDoc
	err := s.meta.FindOne(ctx, bson.D{{Key: "_id", Value: boardID}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return board.Board{}, 0, false, nil
	}
	if err != nil {
		return board.Board{}, 0, false, fmt.Errorf("mongostore: read the board definition: %w", err)
	}
	b := d.board()
	if err := b.Validate(); err != nil {
		return board.Board{}, 0, false, &DocumentError{Collection: collMeta, ID: boardID, Field: "states", Problem: err.Error()}
	}
	return b, d.Version, true, nil
}

// seedBoard stores b as the definition unless one is stored already, and
// returns the stored one.
func (s *Store) seedBoard(ctx context.Context, b board.Board) (board.Board, error) {
	if stored, _, ok, err := s.readBoard(ctx); err != nil || ok {
		return stored, err
	}
	_, err := s.meta.InsertOne(ctx, boardDoc{ID: boardID, Version: 1, States: toStateDocs(b), Retry: toRetryDoc(b)})
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return board.Board{}, writeErr("mongostore: seed the board definition", err)
	}
	// Another agent may have seeded it first: the stored one wins either way.
	stored, _, ok, err := s.readBoard(ctx)
	if err == nil && !ok {
		err = fmt.Errorf("mongostore: the board definition vanished after it was seeded")
	}
	return stored, err
}

func (s *Store) cacheBoard(b board.Board) {
	s.boardMu.Lock()
	defer s.boardMu.Unlock()
	s.board = b
	s.boardAt = time.Now()
}

// LoadBoard reads the stored definition and refreshes the cache.
func (s *Store) LoadBoard(ctx context.Context) (board.Board, error) {
	b, _, ok, err := s.readBoard(ctx)
	if err != nil {
		return board.Board{}, err
	}
	if !ok {
		return board.Board{}, fmt.Errorf("mongostore: no board definition is stored: %w", board.ErrNotFound)
	}
	s.cacheBoard(b)
	return b, nil
}

// freshBoard returns the definition the store's writes decide by: the
// cached one, re-read first (under ctx) when it is older than boardTTL. A failed re-read keeps the cached one: the write
// that asked will meet the same failure on its own and report it.
func (s *Store) freshBoard(ctx context.Context) board.Board {
	s.boardMu.Lock()
	stale := time.Since(s.boardAt) > boardTTL
	b := s.board
	s.boardMu.Unlock()
	if !stale {
		return b
	}
	if nb, err := s.LoadBoard(ctx); err == nil {
		return nb
	}
	return b
}

// requireState is board.Require against a fresh definition; a name the
// cache does not know is re-read once (another agent may just have
// renamed a state into it).
func (s *Store) requireState(ctx context.Context, name string, target bool) (board.State, error) {
	get := func(b board.Board) (board.State, error) {
		if target {
			return b.RequireTarget(name)
		}
		return b.Require(name)
	}
	st, err := get(s.freshBoard(ctx))
	if err == nil {
		return st, nil
	}
	if nb, lerr := s.LoadBoard(ctx); lerr == nil {
		return get(nb)
	}
	return st, err
}

// SetBoard compares-and-sets the stored definition. The comparison is on
// the decoded definition; the write itself is conditional on the version
// it read, so two admins cannot both win.
func (s *Store) SetBoard(ctx context.Context, p board.SetBoardParams) (board.SetBoardResult, error) {
	if err := p.Next.Validate(); err != nil {
		return board.SetBoardResult{}, fmt.Errorf("new board: %w", err)
	}
	cur, ver, ok, err := s.readBoard(ctx)
	if err != nil {
		return board.SetBoardResult{}, err
	}
	if !ok {
		return board.SetBoardResult{}, fmt.Errorf("mongostore: no board definition is stored: %w", board.ErrNotFound)
	}
	if !cur.Equal(p.Expect) {
		s.cacheBoard(cur)
		return board.SetBoardResult{Board: cur, Changed: false}, nil
	}
	res, err := s.meta.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: boardID}, {Key: "version", Value: ver}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "states", Value: toStateDocs(p.Next)}, {Key: "retry", Value: toRetryDoc(p.Next)}, {Key: "version", Value: ver + 1}}}})
	if err != nil {
		return board.SetBoardResult{}, writeErr("mongostore: write the board definition", err)
	}
	if res.MatchedCount == 0 {
		// Another admin's write landed between the read and this one.
		now, err := s.LoadBoard(ctx)
		return board.SetBoardResult{Board: now, Changed: false}, err
	}
	s.cacheBoard(p.Next)
	return board.SetBoardResult{Board: p.Next.Clone(), Changed: true}, nil
}

// SetLabelsFrom is the label compare-and-set of the admin sweeps: one
// conditional update on the labels exactly as expected, never retried
// here — a miss is the caller's to re-transform (DESIGN.md#label-sweeps).
func (s *Store) SetLabelsFrom(ctx context.Context, l board.SetLabelsFromParams) (board.SetLabelsFromResult, error) {
	next, err := l.Normalize()
	if err != nil {
		return board.SetLabelsFromResult{}, err
	}
	// mutate re-plans after a lost race, and the re-plan sees labels that
	// are no longer expect: that is the miss, returned with the card as it
	// is now.
	c, wrote, err := s.mutate(ctx, l.Card, func(c *cardState, clk serverClock) (*change, error) {
		if !l.Writes(c.Labels, next) {
			return nil, nil
		}
		return labelsChange(c, clk, next, l.Reason, l.Actor), nil
	})
	if err != nil {
		return board.SetLabelsFromResult{}, err
	}
	return board.SetLabelsFromResult{Card: c.Card, Changed: wrote}, nil
}

var _ board.BoardAdmin = (*Store)(nil)
