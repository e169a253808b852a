package plugins

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
)

// fuzzStore answers every call from what the call asked, so a caller
// handed any other call's answer notices.
func fuzzStore() *scripted {
	return &scripted{
		getCard: func(_ context.Context, id string) (board.Card, error) {
			if strings.HasPrefix(id, "nf-") {
				return board.Card{}, board.NotFound("card", id)
			}
			return board.Card{ID: id, Title: "title of " + id}, nil
		},
		renewClaims: func(_ context.Context, holds []board.Hold, lease time.Duration) ([]board.RenewResult, error) {
			out := make([]board.RenewResult, 0, len(holds))
			for _, h := range holds {
				r := board.RenewResult{Card: h.Card, LeaseUntil: time.Unix(int64(lease), 0)}
				if h.Token.Epoch%2 == 1 {
					r.Err = board.Conflict(h.Card, h.Token.Marker, h.Token.Epoch)
				}
				out = append(out, r)
			}
			return out, nil
		},
		listCards: func(_ context.Context, f board.ListCardsParams) ([]board.Card, error) {
			out := make([]board.Card, f.Limit)
			for i := range out {
				out[i] = board.Card{ID: fmt.Sprintf("%s-%d", f.State, i), State: f.State}
			}
			return out, nil
		},
	}
}

// FuzzCallBatches: whatever mix of calls is made at once — reads that
// succeed or fail, per-hold results, replies of many sizes, requests
// refused before sending, calls cancelled before or while in flight, all
// in one message or as they come — every caller gets the answer to its
// own call and nothing else, and no failure is taken for a broken plugin.
func FuzzCallBatches(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 0x12, 0x23, 0xfb, 0x44, 0x35, 0x06, 0x17, 0x28})
	f.Add([]byte{0, 0xfe, 0xfe, 0x04, 0x0c, 0x14, 0x1c, 0x05, 0x15})
	f.Add([]byte("a mixed bag of calls, all made at once"))
	conn, _ := servePair(f, fuzzStore())
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		hold := data[0]&1 == 1
		ops := data[1:]
		if len(ops) > 48 {
			ops = ops[:48]
		}
		cc := newCallConn(conn)
		var held *heldSends
		if hold {
			held = holdFirstSend(cc)
		}
		rs := newUnaryRemoteStore(cc, wire.ProtocolVersion)
		defer cc.close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		errs := make(chan error, len(ops)+1)
		run := func(i int, b byte) {
			errs <- fuzzOp(ctx, rs, i, b, !hold)
		}
		if hold {
			go run(-1, 0)
			<-held.sending
		}
		for i, b := range ops {
			go run(i, b)
		}
		if hold {
			sent := 0
			for _, b := range ops {
				if b%6 != 5 { // refused before sending
					sent++
				}
			}
			held.waitQueued(t, sent)
			close(held.release)
		}
		for range len(ops) + btoi(hold) {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// fuzzOp makes the call b selects, as the i-th of its batch, and checks
// its answer is its own. cancels: a cancelling kind may cancel its call
// (off while the first message is held, where a call that never queues
// would leave the count short).
func fuzzOp(ctx context.Context, rs *remoteStore, i int, b byte, cancels bool) error {
	arg := int(b >> 3)
	switch b % 6 {
	case 0:
		id := fmt.Sprintf("ok-%d-%d", i, arg)
		c, err := rs.GetCard(ctx, board.GetCardParams{ID: id})
		if err != nil || c.ID != id || c.Title != "title of "+id {
			return fmt.Errorf("GetCard(%s) = %+v, %v", id, c, err)
		}
	case 1:
		id := fmt.Sprintf("nf-%d", i)
		_, err := rs.GetCard(ctx, board.GetCardParams{ID: id})
		if !errors.Is(err, board.ErrNotFound) || !strings.Contains(err.Error(), id) || brokenPlugin(err) {
			return fmt.Errorf("GetCard(%s) = %v, want its own ErrNotFound", id, err)
		}
	case 2:
		holds := make([]board.Hold, arg%8)
		for j := range holds {
			holds[j] = board.Hold{Card: fmt.Sprintf("h-%d-%d", i, j), Token: board.ClaimToken{Marker: "w-1", Epoch: int64(j)}}
		}
		lease := time.Duration(i+1) * time.Second
		res, err := rs.RenewClaims(ctx, board.RenewClaimsParams{Holds: holds, Lease: lease})
		if err != nil || len(res) != len(holds) {
			return fmt.Errorf("RenewClaims(%d holds) = %d results, %v", len(holds), len(res), err)
		}
		for j, r := range res {
			conflict := errors.Is(r.Err, board.ErrClaimConflict)
			if r.Card != holds[j].Card || !r.LeaseUntil.Equal(time.Unix(int64(lease), 0)) || conflict != (j%2 == 1) {
				return fmt.Errorf("RenewClaims result %d = %+v, want the one of hold %+v", j, r, holds[j])
			}
		}
	case 3:
		state := fmt.Sprintf("s%d", i)
		cs, err := rs.ListCards(ctx, board.ListCardsParams{State: state, Limit: arg * 97})
		if err != nil || len(cs) != arg*97 {
			return fmt.Errorf("ListCards(%s, %d) = %d cards, %v", state, arg*97, len(cs), err)
		}
		for _, c := range cs {
			if c.State != state {
				return fmt.Errorf("ListCards(%s) holds a card of %s", state, c.State)
			}
		}
	case 4:
		id := fmt.Sprintf("ok-c%d", i)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if cancels && arg%2 == 1 {
			cancel() // before the call
		} else if cancels {
			go cancel() // racing it
		}
		c, err := rs.GetCard(cctx, board.GetCardParams{ID: id})
		switch {
		case err == nil:
			if c.ID != id {
				return fmt.Errorf("GetCard(%s), cancelled, answered %+v", id, c)
			}
		case !errors.Is(err, context.Canceled) || !errors.Is(err, board.ErrOutcomeUnknown) || brokenPlugin(err):
			return fmt.Errorf("GetCard(%s), cancelled: %v, want the caller's Canceled", id, err)
		}
	case 5:
		_, err := rs.GetCard(ctx, board.GetCardParams{ID: fmt.Sprintf("bad-%d-\xff", i)})
		if !errors.Is(err, board.ErrInvalidArgument) || brokenPlugin(err) {
			return fmt.Errorf("GetCard of a name that is not UTF-8: %v, want ErrInvalidArgument", err)
		}
	}
	return nil
}
