package lease

import (
	"context"
	"errors"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/boardadmin"
)

// The operator's verbs and the reads. Who asks (actor) is the kernel's
// answer, never a request body's.

// CreateCard creates a card for actor.
func (s *Service) CreateCard(ctx context.Context, actor string, c board.CreateCardParams) (board.Card, error) {
	c.Actor = actor
	return s.cfg.Store.CreateCard(ctx, c)
}

// GetCard reads one card.
func (s *Service) GetCard(ctx context.Context, p board.GetCardParams) (board.Card, error) {
	return s.cfg.Store.GetCard(ctx, p)
}

// ListCards lists cards, oldest first; never nil.
func (s *Service) ListCards(ctx context.Context, f board.ListCardsParams) ([]board.Card, error) {
	cards, err := s.cfg.Store.ListCards(ctx, f)
	if cards == nil && err == nil {
		cards = []board.Card{}
	}
	return cards, err
}

// GetRun reads one run.
func (s *Service) GetRun(ctx context.Context, p board.GetRunParams) (board.Run, error) {
	return s.cfg.Store.GetRun(ctx, p)
}

// Events reads the event log after seq; never nil.
func (s *Service) Events(ctx context.Context, p board.EventsParams) ([]board.Event, error) {
	evs, err := s.cfg.Store.Events(ctx, p)
	if evs == nil && err == nil {
		evs = []board.Event{}
	}
	return evs, err
}

// headPage is the page size of EventsHead's seek.
const headPage = 10000

// EventsHead is the sequence number of the log's last event as of the
// call (0 while the log is empty): what a waiter follows the log after, so
// it sees every event written once it has the answer and none from before
// (DESIGN.md#waiting). The seek reads forward from the highest head this
// service has answered, to the first page shorter than its limit (the end
// of the log as the store saw it, board.EventLog.Events), or from
// Config.HeadHint when that is further, so each call reads only what was
// written since. A head is never
// later than the log it was read from: on the fleet the store's reads stop
// at its horizon (DESIGN.md#event-log), and an event that becomes visible
// later has a higher number than any it showed.
func (s *Service) EventsHead(ctx context.Context) (int64, error) {
	head := s.head.Load()
	if s.cfg.HeadHint != nil {
		head = max(head, s.cfg.HeadHint())
	}
	for pruned := false; ; {
		evs, err := s.cfg.Store.Events(ctx, board.EventsParams{After: head, Limit: headPage})
		if errors.Is(err, board.ErrEventsPruned) && !pruned {
			// A prune (on a fleet, another agent's, bounded by its own
			// effects cursor) cut the log past where this agent knew it
			// was: the seek goes on from the pruned position, which a
			// follow is served from, or from the log's start when the
			// error does not name it (DESIGN.md#retention).
			pruned = true
			var pe *board.EventsPrunedError
			if errors.As(err, &pe) && pe.Through > head {
				head = pe.Through
			} else {
				head = 0
			}
			continue
		}
		if err != nil {
			return 0, err
		}
		if len(evs) > 0 {
			head = evs[len(evs)-1].Seq
		}
		if len(evs) < headPage {
			break
		}
	}
	for {
		cur := s.head.Load()
		if cur >= head || s.head.CompareAndSwap(cur, head) {
			return head, nil
		}
	}
}

// StoredBoard is the board as stored now: another agent sharing the store
// may have changed it since this one last looked.
func (s *Service) StoredBoard(ctx context.Context) (board.Board, error) {
	return s.cfg.Store.LoadBoard(ctx)
}

// operatorReason refuses machine reasons from people: they would silence
// the move's effects and blank its actor (DESIGN.md#provenance).
func operatorReason(r board.Reason) error {
	if board.IsMachineReason(r) {
		return board.Invalid("reason %q is machine provenance; an operator move may not carry it", r)
	}
	return nil
}

// Move is an operator's move of one card; it answers with the card as it is
// after the move. Launch hints are not produced here: the agent's effects
// layer derives them from the store's event log, the one place that also
// sees cascades and other agents' writes.
func (s *Service) Move(ctx context.Context, actor, card, to string, reason board.Reason) (board.Card, error) {
	return s.operatorMove(ctx, s.cfg.Store.SetState, board.MoveParams{Card: card, To: to, Reason: reason, Actor: actor})
}

// Reopen takes a card out of a sink (the only exit, DESIGN.md#reopen).
func (s *Service) Reopen(ctx context.Context, actor, card, to string, reason board.Reason) (board.Card, error) {
	return s.operatorMove(ctx, s.cfg.Store.Reopen, board.MoveParams{Card: card, To: to, Reason: reason, Actor: actor})
}

func (s *Service) operatorMove(ctx context.Context, move func(context.Context, board.MoveParams) error, m board.MoveParams) (board.Card, error) {
	if err := operatorReason(m.Reason); err != nil {
		return board.Card{}, err
	}
	if err := move(ctx, m); err != nil {
		return board.Card{}, err
	}
	return s.cfg.Store.GetCard(ctx, board.GetCardParams{ID: m.Card})
}

// AdjustLabels adds then removes labels for actor.
func (s *Service) AdjustLabels(ctx context.Context, actor, card string, add, remove []string) (board.Card, error) {
	return s.cfg.Store.AdjustLabels(ctx, board.AdjustLabelsParams{Card: card, Add: add, Remove: remove, Actor: actor})
}

// SetLabels replaces the label set for actor; nil is refused (use [] to
// clear), so a request that forgot the field clears nothing.
func (s *Service) SetLabels(ctx context.Context, actor, card string, labels []string) (board.Card, error) {
	if labels == nil {
		return board.Card{}, board.Invalid("labels is required (use [] to clear)")
	}
	return s.cfg.Store.SetLabels(ctx, board.SetLabelsParams{Card: card, Labels: labels, Actor: actor})
}

// ForceRelease is the operator's steal: read the holder, release exactly
// that holder (a claim that changed hands in between is a clean conflict)
// and stop renewing it. The store closes the holder's open run in the same
// write, left resumable (board.FailureClaimReleased), so the next Start
// resumes it and the released holder's late writes are refused by the
// fence. It returns the token released; zero when the card was free.
func (s *Service) ForceRelease(ctx context.Context, actor, card string) (board.ClaimToken, error) {
	c, err := s.cfg.Store.GetCard(ctx, board.GetCardParams{ID: card})
	if err != nil {
		return board.ClaimToken{}, err
	}
	if !c.Claimed() {
		return board.ClaimToken{}, nil
	}
	if err := s.cfg.Store.Release(ctx, board.ReleaseParams{Card: card, Marker: c.Claim, Actor: actor}); err != nil {
		return board.ClaimToken{}, err
	}
	// The store released the marker's claim at whatever epoch it held by
	// then: its holder may have finished and started again since the read.
	// The claim this agent tracks for that marker is the one released, so
	// it is the one to stop renewing and to report lost.
	released := c.Token()
	if h, ok := s.cfg.Claims.Lookup(card); ok && h.Hold.Token.Marker == c.Claim && h.Hold.Token.Epoch >= released.Epoch {
		released = h.Hold.Token
	}
	s.cfg.Claims.RemoveHold(card, released)
	s.cfg.Logger.Info("claim force-released", "card", card, "holder", released.Marker, "epoch", released.Epoch, "actor", actor)
	return released, nil
}

// Admin is a board-administration walker over the store acting for actor.
// dryRun makes it decide and write nothing; progress, when set, hears
// after each card how far the walk got (boardadmin.Config).
func (s *Service) Admin(actor string, dryRun bool, progress func(done, total int)) (*boardadmin.Admin, error) {
	return boardadmin.New(boardadmin.Config{Store: s.cfg.Store, Actor: actor, DryRun: dryRun, Progress: progress})
}
