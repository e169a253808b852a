package mongostore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/leasekeeper/leasekeeper/board"
)

// A Reopen and a promotion exclude each other (DESIGN.md#reopen-promotion).
//
// Each is a rule over two documents: a Reopen of blocker B needs every
// dependent of B still in waiting_deps when B leaves its sink, and a
// promotion of dependent D needs every blocker of D still complete when D
// leaves waiting_deps. With no multi-document atomicity, each write must
// carry what the other one wrote, so the two steps meet on a document:
//
//  1. The Reopen marks B pending under a token of its own (reopen_pending).
//  2. It holds every dependent of B: adds the token to D's reopen_holds and
//     bumps D's reopen_gen, in one write conditioned on D being in
//     waiting_deps. A dependent outside waiting_deps refuses the Reopen.
//  3. It moves B, conditioned on B's pending token still being its own.
//  4. It drops its holds.
//
// A promotion reads D, then D's blockers, and moves D conditioned on D's
// holds and reopen_gen being what it read. A hold it finds it breaks: it
// clears B's pending token (if still that token), so step 3 of that Reopen
// can no longer land, drops the hold, and decides again from a fresh read.
// Both moves landing would need D held (step 2) before B moved (step 3) and
// D's move after that, with no hold on D at its read — impossible unless a
// promotion broke the hold, which cleared B's token first, so step 3 did
// not land. A Reopen that dies between its steps leaves a pending token
// and holds behind; the next promotion of D breaks them, and the next
// Reopen of B overwrites its token.

const (
	fieldReopenPending = "reopen_pending"
	fieldReopenHolds   = "reopen_holds"
	fieldReopenGen     = "reopen_gen"
)

// maxReopenAttempts bounds a Reopen that keeps being broken by promotions
// (each break means another operator or worker completed a blocker of one
// of its dependents meanwhile).
const maxReopenAttempts = 8

// errReopenBroken: a promotion cleared this Reopen's pending token.
var errReopenBroken = errors.New("mongostore: reopen broken by a promotion")

// reopenToken names one Reopen attempt of card: random, then the card, so
// a promotion that finds the hold knows which blocker to clear.
func reopenToken(card string) string {
	var key [12]byte
	_, _ = rand.Read(key[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(key[:]) + ":" + card
}

// tokenBlocker is the blocker a reopen token names.
func tokenBlocker(token string) string {
	_, card, _ := strings.Cut(token, ":")
	return card
}

// reopenOnce runs the four steps once. done is false when the attempt was
// broken and the Reopen should decide again from a fresh read.
func (s *Store) reopenOnce(ctx context.Context, m board.MoveParams, b board.Board) (done bool, err error) {
	token := reopenToken(m.Card)
	// Step 1.
	_, _, err = s.mutate(ctx, m.Card, func(c *cardState, clk serverClock) (*change, error) {
		if err := b.CheckReopen(m.Card, c.State, m.From); err != nil {
			return nil, err
		}
		return &change{cond: bson.D{{Key: "state", Value: c.State}}, set: bson.D{{Key: fieldReopenPending, Value: token}}}, nil
	})
	if err != nil {
		return true, err
	}
	var held []string
	defer func() {
		// Step 4, and the undoing of step 1 when step 3 did not land. Both
		// are best effort: what they leave behind, a promotion breaks.
		if err != nil || !done {
			_, _ = s.cards.UpdateOne(ctx, bson.D{{Key: "_id", Value: m.Card}, {Key: fieldReopenPending, Value: token}},
				bson.D{{Key: "$unset", Value: bson.D{{Key: fieldReopenPending, Value: ""}}}})
		}
		if len(held) > 0 {
			_, _ = s.cards.UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: held}}}},
				bson.D{{Key: "$pull", Value: bson.D{{Key: fieldReopenHolds, Value: token}}}})
		}
	}()
	// Step 2, oldest dependent first, so the refusal names the same card
	// as the bbolt twin's.
	deps, err := s.findCards(ctx, bson.D{{Key: "depends_on", Value: m.Card}}, options.Find().SetSort(creationOrder))
	if err != nil {
		return true, err
	}
	for _, d := range deps {
		if err := b.ReopenBlockedBy(m.Card, d); err != nil {
			return true, err
		}
		res, err := s.cards.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: d.ID}, {Key: "state", Value: board.StateWaitingDeps}},
			bson.D{
				{Key: "$addToSet", Value: bson.D{{Key: fieldReopenHolds, Value: token}}},
				{Key: "$inc", Value: bson.D{{Key: fieldReopenGen, Value: int64(1)}}},
			})
		if err != nil {
			return true, writeErr(fmt.Sprintf("mongostore: hold dependent %q of %q", d.ID, m.Card), err)
		}
		if res.MatchedCount == 0 {
			return false, nil // it left waiting_deps (or went) since the listing: decide again
		}
		held = append(held, d.ID)
	}
	// Step 3.
	_, _, err = s.mutate(ctx, m.Card, func(c *cardState, clk serverClock) (*change, error) {
		if c.reopenPending != token {
			return nil, errReopenBroken
		}
		if err := b.CheckReopen(m.Card, c.State, m.From); err != nil {
			return nil, err
		}
		ch := freshAttempts(moveChange(c, clk, m.To, m.Reason, m.Actor))
		ch.cond = append(ch.cond, bson.E{Key: fieldReopenPending, Value: token})
		ch.unset = append(ch.unset, fieldReopenPending)
		return ch, nil
	})
	if errors.Is(err, errReopenBroken) {
		return false, nil
	}
	return err == nil, err
}

// breakReopens breaks the Reopens holding dependent id (holds) and those
// pending on its blockers (pending): each one's token is cleared on its
// blocker (so its move cannot land), then a hold is dropped. The caller
// decides again from a fresh read.
func (s *Store) breakReopens(ctx context.Context, id string, holds, pending []string) error {
	for _, t := range pending {
		if _, err := s.cards.UpdateOne(ctx, bson.D{{Key: "_id", Value: tokenBlocker(t)}, {Key: fieldReopenPending, Value: t}},
			bson.D{{Key: "$unset", Value: bson.D{{Key: fieldReopenPending, Value: ""}}}}); err != nil {
			return writeErr(fmt.Sprintf("mongostore: break the reopen of %q", tokenBlocker(t)), err)
		}
	}
	for _, t := range holds {
		if _, err := s.cards.UpdateOne(ctx, bson.D{{Key: "_id", Value: tokenBlocker(t)}, {Key: fieldReopenPending, Value: t}},
			bson.D{{Key: "$unset", Value: bson.D{{Key: fieldReopenPending, Value: ""}}}}); err != nil {
			return writeErr(fmt.Sprintf("mongostore: break the reopen of %q", tokenBlocker(t)), err)
		}
		if _, err := s.cards.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$pull", Value: bson.D{{Key: fieldReopenHolds, Value: t}}}}); err != nil {
			return writeErr(fmt.Sprintf("mongostore: drop a reopen hold on %q", id), err)
		}
	}
	return nil
}

// heldError is a promotion's plan finding Reopens in its way: holds on the
// dependent (tokens), or tokens pending on its blockers (pending).
type heldError struct{ tokens, pending []string }

func (e *heldError) Error() string {
	return fmt.Sprintf("held by %d reopen(s), %d pending on blockers", len(e.tokens), len(e.pending))
}
