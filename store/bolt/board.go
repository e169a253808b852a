package boltstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/board"
)

// The board definition is stored in the meta bucket, next to the schema
// stamp, as JSON (DESIGN.md#board-in-store: the board lives in the store). A new file is
// seeded from Options.Board; after that the stored definition wins, and the
// agent warns at start when its configuration disagrees. It is an optional
// key, not a layout change: a file without it (written before the key
// existed) is seeded on its next open, so the schema version stays.
var keyBoard = []byte("board")

// loadOrSeedBoard returns the stored definition, storing b first when the
// file has none.
func loadOrSeedBoard(tx *bolt.Tx, b board.Board) (board.Board, error) {
	meta := tx.Bucket(bucketMeta)
	if raw := meta.Get(keyBoard); raw != nil {
		return decodeBoard(raw)
	}
	raw, err := json.Marshal(b)
	if err != nil {
		return board.Board{}, err
	}
	return b, meta.Put(keyBoard, raw)
}

func decodeBoard(raw []byte) (board.Board, error) {
	var b board.Board
	if err := json.Unmarshal(raw, &b); err != nil {
		return board.Board{}, fmt.Errorf("%w: stored board definition: %v", ErrSchema, err)
	}
	if err := b.Validate(); err != nil {
		return board.Board{}, fmt.Errorf("%w: stored board definition: %v", ErrSchema, err)
	}
	return b, nil
}

// brd is the current definition, for validation inside the verbs. This
// process is the file's only writer (DESIGN.md#twin-unleased), so the cache is always
// what is stored.
func (s *Store) brd() board.Board { return *s.def.Load() }

// LoadBoard reads the stored definition.
func (s *Store) LoadBoard(ctx context.Context) (board.Board, error) {
	if err := ctx.Err(); err != nil {
		return board.Board{}, err
	}
	var b board.Board
	err := s.view(func(r *snap) error {
		raw := r.get(bucketMeta, keyBoard)
		if raw == nil {
			return fmt.Errorf("boltstore: no board definition is stored: %w", board.ErrNotFound)
		}
		var err error
		b, err = decodeBoard(raw)
		return err
	})
	if err != nil {
		return board.Board{}, err
	}
	s.def.Store(&b)
	return b.Clone(), nil
}

// SetBoard compares-and-sets the stored definition in one write.
func (s *Store) SetBoard(ctx context.Context, p board.SetBoardParams) (board.SetBoardResult, error) {
	if err := p.Next.Validate(); err != nil {
		return board.SetBoardResult{}, fmt.Errorf("new board: %w", err)
	}
	raw, err := json.Marshal(p.Next)
	if err != nil {
		return board.SetBoardResult{}, err
	}
	var stored board.Board
	var changed bool
	err = s.write(ctx, func(w *wtx) error {
		changed = false
		cur, err := decodeBoard(w.get(bucketMeta, keyBoard))
		if err != nil {
			return err
		}
		if !cur.Equal(p.Expect) {
			stored = cur
			return nil
		}
		w.set(bucketMeta, keyBoard, raw)
		stored, changed = p.Next.Clone(), true
		return nil
	})
	if err != nil {
		return board.SetBoardResult{}, err
	}
	cached := stored.Clone()
	s.def.Store(&cached)
	return board.SetBoardResult{Board: stored, Changed: changed}, nil
}

// SetLabelsFrom writes the labels while they are still exactly l.Expect,
// in one write; a miss returns the card as it is (DESIGN.md#label-sweeps).
func (s *Store) SetLabelsFrom(ctx context.Context, l board.SetLabelsFromParams) (board.SetLabelsFromResult, error) {
	next, err := l.Normalize()
	if err != nil {
		return board.SetLabelsFromResult{}, err
	}
	var out board.Card
	var changed bool
	err = s.write(ctx, func(w *wtx) error {
		changed = false
		rec, err := w.getCard(l.Card)
		if err != nil {
			return err
		}
		if !l.Writes(rec.Labels, next) {
			out = rec.Card
			return nil
		}
		changed = true
		return s.writeLabels(w, rec, slices.Clone(next), l.Reason, l.Actor, &out)
	})
	return board.SetLabelsFromResult{Card: out, Changed: changed}, err
}

var _ board.BoardAdmin = (*Store)(nil)
