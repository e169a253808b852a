package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/watchdog"
)

// simStore is one simulated agent's connection to the store: every write the
// agent makes — its reaper's, its heartbeat's, and the owner writes it makes
// on its workers' behalf — goes through it, so the simulation can kill the
// agent between any two of its writes or lose the reply of one.
//
// It is a simConn, not a whole board.Store: the simulated agent reaches the
// store only through its reaper (watchdog.Store), its heartbeat and its
// workers' claims; the operator's writes go to the store itself. It names
// every verb of simConn itself: the ones it does not intercept (the reads,
// and the watchdog's listing, whose signature is the reaper's business)
// pass through untouched. TestSimStoreCoversEveryVerb keeps the list of
// what is intercepted honest as the roles grow.
type simStore struct {
	inner simConn
	a     *simAgent

	// crashIn, when ≥ 0, is how many more writes go through before the
	// agent dies: the next write after them, and every one after that, is
	// refused without reaching the store.
	crashIn int
	crashed bool
	// lose, when set, makes the next write land and then return this kind
	// of failure to its caller instead of its answer.
	lose  loseKind
	trace func(format string, args ...any)
}

// simConn is what a simulated agent calls on the store: its reaper's
// verbs, and the claims its heartbeat renews and its workers take.
type simConn interface {
	watchdog.Store
	board.Claimer
}

var _ simConn = (*simStore)(nil)

type loseKind int

const (
	loseNone loseKind = iota
	loseUnknown
	loseTransport
)

var (
	errAgentKilled  = errors.New("sim: the agent was killed mid-write")
	errTransportCut = errors.New("sim: transport error: connection reset by peer after the request was sent")
)

// simWrites are the verbs simStore intercepts: every write of simConn. The
// reads, which it passes through, are the verbs board.IsRead names. A write
// not in the list fails TestSimStoreCoversEveryVerb, which is the prompt to
// intercept it below.
var simWrites = []string{
	"Claim", "ClaimNext", "RenewClaims",
	"SetStateOwned", "SetLastRunOwned", "SetAwaitingInputOwned", "SetGaveUpOwned",
	"ExpireClaimOwned", "DisownClaimOwned", "ReleaseOwned", "ReleaseExpired",
	"CreateRun", "UpdateRun", "ReclaimExpired",
}

// TestSimStoreCoversEveryVerb pins that every verb of simConn is either
// intercepted by simStore or named as deliberately passed through, so a new
// write verb of the roles the agent calls cannot slip past the
// simulation's fault injection unnoticed.
func TestSimStoreCoversEveryVerb(t *testing.T) {
	overridden := simStoreOverrides()
	st := reflect.TypeFor[simConn]()
	for i := range st.NumMethod() {
		name := st.Method(i).Name
		switch {
		case slices.Contains(simWrites, name):
		case board.IsRead(name):
		default:
			t.Errorf("simConn verb %s writes (it is not marked //storegen:read in board.Store) but simStore does not intercept it: intercept it and list it in simWrites", name)
		}
	}
	// Every name in simWrites must really be overridden: a stale entry
	// would claim a fault the wrapper does not inject.
	for _, name := range simWrites {
		if !overridden[name] {
			t.Errorf("simWrites names %s but simStore does not override it", name)
		}
	}
}

// simStoreOverrides calls every intercepted verb on a simStore whose agent
// is already dead and over no store at all, and reports which calls the
// wrapper refused itself. A verb that was not overridden reaches the
// embedded nil store and panics, which is recovered and reported as false.
func simStoreOverrides() map[string]bool {
	ctx := context.Background()
	s := &simStore{crashed: true}
	out := map[string]bool{}
	try := func(name string, f func() error) {
		defer func() {
			if recover() != nil {
				out[name] = false
			}
		}()
		out[name] = errors.Is(f(), errAgentKilled)
	}
	try("Claim", func() error { _, err := s.Claim(ctx, board.ClaimParams{}); return err })
	try("ClaimNext", func() error { _, err := s.ClaimNext(ctx, board.ClaimNextParams{}); return err })
	try("RenewClaims", func() error {
		_, err := s.RenewClaims(ctx, board.RenewClaimsParams{Holds: nil, Lease: time.Second})
		return err
	})
	try("SetStateOwned", func() error { _, err := s.SetStateOwned(ctx, board.SetStateOwnedParams{}); return err })
	try("SetLastRunOwned", func() error {
		return s.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: "", Token: board.ClaimToken{}, RunID: ""})
	})
	try("SetAwaitingInputOwned", func() error {
		return s.SetAwaitingInputOwned(ctx, board.SetAwaitingInputOwnedParams{Card: "", Token: board.ClaimToken{}, Awaiting: false})
	})
	try("SetGaveUpOwned", func() error {
		return s.SetGaveUpOwned(ctx, board.SetGaveUpOwnedParams{Card: "", Token: board.ClaimToken{}, GaveUp: nil})
	})
	try("ExpireClaimOwned", func() error { return s.ExpireClaimOwned(ctx, board.OwnedParams{Card: "", Token: board.ClaimToken{}}) })
	try("DisownClaimOwned", func() error { return s.DisownClaimOwned(ctx, board.OwnedParams{Card: "", Token: board.ClaimToken{}}) })
	try("ReleaseOwned", func() error { return s.ReleaseOwned(ctx, board.OwnedParams{Card: "", Token: board.ClaimToken{}}) })
	try("ReleaseExpired", func() error { return s.ReleaseExpired(ctx, board.ReleaseExpiredParams{}) })
	try("CreateRun", func() error { _, err := s.CreateRun(ctx, board.CreateRunParams{}); return err })
	try("UpdateRun", func() error { _, err := s.UpdateRun(ctx, board.UpdateRunParams{}); return err })
	try("ReclaimExpired", func() error { _, err := s.ReclaimExpired(ctx, board.ReclaimExpiredParams{}); return err })
	return out
}

// admit decides whether a write may reach the store: a killed agent writes
// nothing more.
func (s *simStore) admit(verb, card string) error {
	if s.crashed {
		return fmt.Errorf("%s %s: %w", verb, card, errAgentKilled)
	}
	if s.crashIn == 0 {
		s.crashed = true
		if s.trace != nil {
			s.trace("agent %s killed before %s %s", s.a.marker, verb, card)
		}
		return fmt.Errorf("%s %s: %w", verb, card, errAgentKilled)
	}
	if s.crashIn > 0 {
		s.crashIn--
	}
	return nil
}

// stamp runs before a write that stamps a lease on the fleet twin (a claim,
// a renewal, a transfer): it lets one second of simulated time pass, so no
// two such writes share a second of the server's clock. The twin counts
// the real round trip of its clock reading against the lease it stamps, a
// few milliseconds that differ from run to run; two leases stamped in the
// same second would then sort (lease ascending, in the expired listing)
// by those milliseconds, and a seed would not replay. A second apart, they
// sort by simulated time alone. The local twin stamps its own clock
// exactly, so it needs none of this.
func (s *simStore) stamp() {
	if s.a != nil && s.a.w != nil && s.a.w.fleet {
		s.a.w.elapsed.Add(int64(time.Second))
	}
}

// answer is what the caller hears back from a write that reached the store.
func (s *simStore) answer(verb, card string, err error) error {
	k := s.lose
	if k == loseNone {
		return err
	}
	s.lose = loseNone
	if s.trace != nil {
		s.trace("agent %s: the reply of %s %s is lost (it answered %v)", s.a.marker, verb, card, err)
	}
	if k == loseUnknown {
		return fmt.Errorf("%s %s: %w", verb, card, board.ErrOutcomeUnknown)
	}
	return fmt.Errorf("%s %s: %w", verb, card, errTransportCut)
}

func (s *simStore) Claim(ctx context.Context, r board.ClaimParams) (board.Card, error) {
	if err := s.admit("Claim", r.Card); err != nil {
		return board.Card{}, err
	}
	s.stamp()
	c, err := s.inner.Claim(ctx, r)
	if err = s.answer("Claim", r.Card, err); err != nil {
		return board.Card{}, err
	}
	return c, nil
}

func (s *simStore) ClaimNext(ctx context.Context, r board.ClaimNextParams) (board.Card, error) {
	if err := s.admit("ClaimNext", ""); err != nil {
		return board.Card{}, err
	}
	s.stamp()
	c, err := s.inner.ClaimNext(ctx, r)
	if err = s.answer("ClaimNext", c.ID, err); err != nil {
		return board.Card{}, err
	}
	return c, nil
}

func (s *simStore) RenewClaims(ctx context.Context, p board.RenewClaimsParams) ([]board.RenewResult, error) {
	hs := p.Holds
	if err := s.admit("RenewClaims", fmt.Sprint(len(hs))); err != nil {
		return nil, err
	}
	s.stamp()
	out, err := s.inner.RenewClaims(ctx, p)
	if err == nil && s.a != nil && s.a.w != nil {
		s.a.w.checkRenewals(s.a, hs, out)
	}
	if err = s.answer("RenewClaims", fmt.Sprint(len(hs)), err); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *simStore) SetStateOwned(ctx context.Context, m board.SetStateOwnedParams) (board.MoveResult, error) {
	if err := s.admit("SetStateOwned", m.Card); err != nil {
		return board.MoveResult{}, err
	}
	changed, err := s.inner.SetStateOwned(ctx, m)
	if err = s.answer("SetStateOwned", m.Card, err); err != nil {
		return board.MoveResult{}, err
	}
	return changed, nil
}

func (s *simStore) SetLastRunOwned(ctx context.Context, p board.SetLastRunOwnedParams) error {
	card := p.Card
	if err := s.admit("SetLastRunOwned", card); err != nil {
		return err
	}
	return s.answer("SetLastRunOwned", card, s.inner.SetLastRunOwned(ctx, p))
}

func (s *simStore) SetAwaitingInputOwned(ctx context.Context, p board.SetAwaitingInputOwnedParams) error {
	card := p.Card
	if err := s.admit("SetAwaitingInputOwned", card); err != nil {
		return err
	}
	return s.answer("SetAwaitingInputOwned", card, s.inner.SetAwaitingInputOwned(ctx, p))
}

func (s *simStore) SetGaveUpOwned(ctx context.Context, p board.SetGaveUpOwnedParams) error {
	card := p.Card
	if err := s.admit("SetGaveUpOwned", card); err != nil {
		return err
	}
	return s.answer("SetGaveUpOwned", card, s.inner.SetGaveUpOwned(ctx, p))
}

func (s *simStore) ExpireClaimOwned(ctx context.Context, p board.OwnedParams) error {
	card := p.Card
	if err := s.admit("ExpireClaimOwned", card); err != nil {
		return err
	}
	return s.answer("ExpireClaimOwned", card, s.inner.ExpireClaimOwned(ctx, p))
}

func (s *simStore) DisownClaimOwned(ctx context.Context, p board.OwnedParams) error {
	card := p.Card
	if err := s.admit("DisownClaimOwned", card); err != nil {
		return err
	}
	return s.answer("DisownClaimOwned", card, s.inner.DisownClaimOwned(ctx, p))
}

func (s *simStore) ReleaseOwned(ctx context.Context, p board.OwnedParams) error {
	card := p.Card
	if err := s.admit("ReleaseOwned", card); err != nil {
		return err
	}
	return s.answer("ReleaseOwned", card, s.inner.ReleaseOwned(ctx, p))
}

func (s *simStore) ReleaseExpired(ctx context.Context, r board.ReleaseExpiredParams) error {
	if err := s.admit("ReleaseExpired", r.Card); err != nil {
		return err
	}
	return s.answer("ReleaseExpired", r.Card, s.inner.ReleaseExpired(ctx, r))
}

func (s *simStore) CreateRun(ctx context.Context, r board.CreateRunParams) (board.Run, error) {
	if err := s.admit("CreateRun", r.Run.Card); err != nil {
		return board.Run{}, err
	}
	out, err := s.inner.CreateRun(ctx, r)
	if err = s.answer("CreateRun", r.Run.Card, err); err != nil {
		return board.Run{}, err
	}
	return out, nil
}

func (s *simStore) UpdateRun(ctx context.Context, u board.UpdateRunParams) (board.Run, error) {
	if err := s.admit("UpdateRun", u.ID); err != nil {
		return board.Run{}, err
	}
	out, err := s.inner.UpdateRun(ctx, u)
	if err = s.answer("UpdateRun", u.ID, err); err != nil {
		return board.Run{}, err
	}
	return out, nil
}

// ReclaimExpired is intercepted because it is the reaper's first write on a
// card: killing the agent right after it is what leaves an abandoned
// recovery claim behind. The request passes through unchanged.
func (s *simStore) ReclaimExpired(ctx context.Context, r board.ReclaimExpiredParams) (board.Card, error) {
	if err := s.admit("ReclaimExpired", r.Card); err != nil {
		return board.Card{}, err
	}
	s.stamp()
	c, err := s.inner.ReclaimExpired(ctx, r)
	if err = s.answer("ReclaimExpired", r.Card, err); err != nil {
		return board.Card{}, err
	}
	return c, nil
}

// The reads (board.IsRead), passed through.

func (s *simStore) LoadBoard(ctx context.Context) (board.Board, error) {
	return s.inner.LoadBoard(ctx)
}
func (s *simStore) Now(ctx context.Context) (time.Time, error) { return s.inner.Now(ctx) }
func (s *simStore) GetCard(ctx context.Context, p board.GetCardParams) (board.Card, error) {
	return s.inner.GetCard(ctx, p)
}
func (s *simStore) ListCards(ctx context.Context, f board.ListCardsParams) ([]board.Card, error) {
	return s.inner.ListCards(ctx, f)
}
func (s *simStore) CountCards(ctx context.Context) (board.CardCounts, error) {
	return s.inner.CountCards(ctx)
}
func (s *simStore) Dependents(ctx context.Context, p board.DependentsParams) ([]board.Card, error) {
	return s.inner.Dependents(ctx, p)
}
func (s *simStore) GetRun(ctx context.Context, p board.GetRunParams) (board.Run, error) {
	return s.inner.GetRun(ctx, p)
}
func (s *simStore) ListExpiredClaimCandidates(ctx context.Context, q board.ListExpiredClaimCandidatesParams) (board.ListExpiredClaimCandidatesResult, error) {
	return s.inner.ListExpiredClaimCandidates(ctx, q)
}
func (s *simStore) ListUnleasedRunningClaims(ctx context.Context, p board.ListUnleasedRunningClaimsParams) ([]board.Card, error) {
	return s.inner.ListUnleasedRunningClaims(ctx, p)
}
