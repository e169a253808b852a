package plugins

import (
	"context"
	"fmt"
	"path"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// verbs are the board.Store verbs as RPCs to a store plugin, one RPC per
// verb. Each hands the caller's ctx to the RPC: its deadline reaches the
// plugin, and the plugin's handler is cancelled when it is cancelled. The
// connection under them classifies every failed call (classified), so a
// verb returns the error it is given: remoteStore and Proxy share them.
type verbs struct {
	rpc storepb.StoreClient
}

// remoteStore is a board.Store over one connection to a store plugin: the
// verbs, carried on the Calls stream with the calls made at the same time
// (callConn), or on their own with protocol 3.
type remoteStore struct {
	*verbs
	calls *callConn // nil with protocol 3
	// conn is the classified connection under the verbs, for the Proxy's
	// supervisor to call through.
	conn grpc.ClientConnInterface

	mu     sync.Mutex
	traits board.Traits
}

var _ board.Store = (*remoteStore)(nil)

// newRemoteStore is the store over conn's Calls stream (protocol 4 and
// later), speaking protocol version.
func newRemoteStore(conn grpc.ClientConnInterface, version int) *remoteStore {
	cc := newCallConn(conn)
	rs := newUnaryRemoteStore(cc, version)
	rs.calls = cc
	return rs
}

// newUnaryRemoteStore sends every call as its own RPC on conn (protocol 3;
// and protocol 4 and later under newRemoteStore's Calls stream).
func newUnaryRemoteStore(conn grpc.ClientConnInterface, version int) *remoteStore {
	c := versionGuard{classified{sendableConn{conn}}, version}
	return &remoteStore{verbs: newVerbs(c), conn: c}
}

// versionGuard refuses, before it is sent, a request the plugin's
// negotiated protocol cannot carry whole: a retry policy, a retryable
// verdict or a retry's backoff to a plugin from before the retry policy
// (DESIGN.md#retries), a Prune or a DeleteCard to one from before retention
// (DESIGN.md#retention), and a ClaimNext or a Start that routes by labels
// to one from before labels (DESIGN.md#label-routing), which would take the
// oldest card of all. It sits under the Proxy's verbs too (the supervisor
// calls through remoteStore.conn), so a plugin replaced by an older build
// is caught on its first such call.
type versionGuard struct {
	grpc.ClientConnInterface
	version int
}

func (g versionGuard) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if g.version < retryProtocolVersion {
		if what := retryWrite(args); what != "" {
			return fmt.Errorf("store plugin: %s: %w", path.Base(method), board.Invalid(
				"the plugin speaks store protocol %d, from before the retry policy (protocol %d), and would drop %s: rebuild it against this leasekeeper release; nothing was sent",
				g.version, retryProtocolVersion, what))
		}
	}
	if g.version < retentionProtocolVersion {
		switch args.(type) {
		case *storepb.PruneRequest, *storepb.DeleteCardRequest:
			return fmt.Errorf("store plugin: %s: %w", path.Base(method), board.Invalid(
				"the plugin speaks store protocol %d, from before retention (protocol %d), and cannot prune or delete cards: rebuild it against this leasekeeper release; nothing was sent",
				g.version, retentionProtocolVersion))
		}
	}
	if g.version < labelsProtocolVersion {
		var labels []string
		switch r := args.(type) {
		case *storepb.ClaimNextRequest:
			labels = r.GetLabels()
		case *storepb.StartRequest:
			labels = r.GetLabels()
		}
		if len(labels) > 0 {
			return fmt.Errorf("store plugin: %s: %w", path.Base(method), board.Invalid(
				"the plugin speaks store protocol %d, from before routing by labels (protocol %d), and would ignore the labels %q: rebuild it against this leasekeeper release; nothing was sent",
				g.version, labelsProtocolVersion, labels))
		}
	}
	if err := g.ClientConnInterface.Invoke(ctx, method, args, reply, opts...); err != nil {
		return err
	}
	if g.version < retryProtocolVersion {
		// A plugin from before the retry policy keeps no attempts
		// counter, and cannot give a card a fresh set either: its cards'
		// runs are their attempts, the count the run ceiling had before
		// the policy made it max_attempts (DESIGN.md#retries). Read as 0,
		// the ceiling would never be reached.
		if m, ok := reply.(proto.Message); ok {
			runsAsAttempts(m.ProtoReflect())
		}
	}
	return nil
}

// runsAsAttempts sets every card m holds, at any depth, to count its runs
// as its attempts (versionGuard.Invoke).
func runsAsAttempts(m protoreflect.Message) {
	if c, ok := m.Interface().(*storepb.Card); ok {
		c.Attempts = max(c.GetAttempts(), int64(len(c.GetRuns().GetValues())))
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil || fd.IsMap():
		case fd.IsList():
			for i, l := 0, v.List(); i < l.Len(); i++ {
				runsAsAttempts(l.Get(i).Message())
			}
		default:
			runsAsAttempts(v.Message())
		}
		return true
	})
}

func newVerbs(conn grpc.ClientConnInterface) *verbs {
	return &verbs{rpc: storepb.NewStoreClient(conn)}
}

// load is the first round trip, the one that proves the plugin serves the
// store (its reply carries the stored board): it reads the traits the
// plugin declares.
func (s *remoteStore) load(ctx context.Context) error {
	r, err := s.rpc.Board(ctx, &storepb.BoardRequest{})
	if err != nil {
		return err
	}
	t := r.GetTraits()
	s.mu.Lock()
	s.traits = board.Traits{Shared: t.GetShared(), ServerClock: t.GetServerClock(), Outbox: t.GetOutbox()}
	s.mu.Unlock()
	return nil
}

// Traits are what the plugin declared in its first Board reply.
func (s *remoteStore) Traits() board.Traits {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.traits
}

func (s *verbs) CreateCard(ctx context.Context, c board.NewCard) (board.Card, error) {
	r, err := s.rpc.CreateCard(ctx, &storepb.CreateCardRequest{
		Id: c.ID, Title: c.Title, State: c.State,
		Labels: stringsToPB(c.Labels), DependsOn: stringsToPB(c.DependsOn), Actor: c.Actor,
		Retry: retryToPB(c.Retry),
	})
	if err != nil {
		return board.Card{}, err
	}
	return cardFromPB(r.GetCard()), nil
}

func (s *verbs) GetCard(ctx context.Context, id string) (board.Card, error) {
	r, err := s.rpc.GetCard(ctx, &storepb.GetCardRequest{Id: id})
	if err != nil {
		return board.Card{}, err
	}
	return cardFromPB(r.GetCard()), nil
}

func (s *verbs) ListCards(ctx context.Context, f board.CardFilter) ([]board.Card, error) {
	r, err := s.rpc.ListCards(ctx, &storepb.ListCardsRequest{State: f.State, Limit: int64(f.Limit), ClaimedOnly: f.ClaimedOnly, RecoveryOnly: f.RecoveryOnly, ClaimHosts: f.ClaimHosts})
	if err != nil {
		return nil, err
	}
	return cardsFromPB(r), nil
}

func (s *verbs) Dependents(ctx context.Context, id string) ([]board.Card, error) {
	r, err := s.rpc.Dependents(ctx, &storepb.DependentsRequest{Id: id})
	if err != nil {
		return nil, err
	}
	return cardsFromPB(r), nil
}

func (s *verbs) Claim(ctx context.Context, c board.ClaimRequest) (board.Card, board.ClaimToken, error) {
	r, err := s.rpc.Claim(ctx, &storepb.ClaimRequest{Card: c.Card, Marker: c.Marker, LeaseNanos: int64(c.Lease)})
	if err != nil {
		return board.Card{}, board.ClaimToken{}, err
	}
	return cardFromPB(r.GetCard()), tokenFromPB(r.GetToken()), nil
}

func (s *verbs) Start(ctx context.Context, sr board.StartRequest) (board.Started, error) {
	r, err := s.rpc.Start(ctx, startToPB(sr))
	if err != nil {
		return board.Started{}, err
	}
	return startedFromPB(r), nil
}

func (s *verbs) Finish(ctx context.Context, f board.FinishRequest) (board.Finished, error) {
	r, err := s.rpc.Finish(ctx, finishToPB(f))
	if err != nil {
		return board.Finished{}, err
	}
	return finishedFromPB(r), nil
}

func (s *verbs) ClaimNext(ctx context.Context, c board.ClaimNextRequest) (board.Card, board.ClaimToken, error) {
	r, err := s.rpc.ClaimNext(ctx, &storepb.ClaimNextRequest{Marker: c.Marker, LeaseNanos: int64(c.Lease), Labels: c.Labels})
	if err != nil {
		return board.Card{}, board.ClaimToken{}, err
	}
	return cardFromPB(r.GetCard()), tokenFromPB(r.GetToken()), nil
}

func (s *verbs) RenewClaims(ctx context.Context, holds []board.Hold, lease time.Duration) ([]board.RenewResult, error) {
	req := &storepb.RenewClaimsRequest{LeaseNanos: int64(lease), Nil: holds == nil, Holds: make([]*storepb.Hold, 0, len(holds))}
	for _, h := range holds {
		req.Holds = append(req.Holds, &storepb.Hold{Card: h.Card, Token: tokenToPB(h.Token)})
	}
	r, err := s.rpc.RenewClaims(ctx, req)
	if err != nil {
		return nil, err
	}
	if r.GetNil() {
		return nil, nil
	}
	out := make([]board.RenewResult, 0, len(r.GetResults()))
	for _, rr := range r.GetResults() {
		out = append(out, board.RenewResult{Card: rr.GetCard(), LeaseUntil: timeFromPB(rr.GetLeaseUntil()), Err: errorFromPB(rr.GetErr())})
	}
	return out, nil
}

func (s *verbs) SetStateOwned(ctx context.Context, m board.OwnedMove) (bool, error) {
	r, err := s.rpc.SetStateOwned(ctx, &storepb.SetStateOwnedRequest{
		Card: m.Card, Token: tokenToPB(m.Token), To: m.To, From: m.From, Reason: string(m.Reason), Retry: m.Retry,
	})
	if err != nil {
		return false, err
	}
	return r.GetChanged(), nil
}

func (s *verbs) SetLastRunOwned(ctx context.Context, card string, tok board.ClaimToken, runID string) error {
	_, err := s.rpc.SetLastRunOwned(ctx, &storepb.SetLastRunOwnedRequest{Card: card, Token: tokenToPB(tok), RunId: runID})
	return err
}

func (s *verbs) SetAwaitingInputOwned(ctx context.Context, card string, tok board.ClaimToken, awaiting bool) error {
	_, err := s.rpc.SetAwaitingInputOwned(ctx, &storepb.SetAwaitingInputOwnedRequest{Card: card, Token: tokenToPB(tok), Awaiting: awaiting})
	return err
}

func (s *verbs) SetGaveUpOwned(ctx context.Context, card string, tok board.ClaimToken, g *board.GaveUp) error {
	_, err := s.rpc.SetGaveUpOwned(ctx, &storepb.SetGaveUpOwnedRequest{Card: card, Token: tokenToPB(tok), GaveUp: gaveUpToPB(g)})
	return err
}

func (s *verbs) ExpireClaimOwned(ctx context.Context, card string, tok board.ClaimToken) error {
	_, err := s.rpc.ExpireClaimOwned(ctx, &storepb.OwnedCardRequest{Card: card, Token: tokenToPB(tok)})
	return err
}

func (s *verbs) ReleaseOwned(ctx context.Context, card string, tok board.ClaimToken) error {
	_, err := s.rpc.ReleaseOwned(ctx, &storepb.OwnedCardRequest{Card: card, Token: tokenToPB(tok)})
	return err
}

func (s *verbs) Release(ctx context.Context, card, marker, actor string) error {
	_, err := s.rpc.Release(ctx, &storepb.ReleaseRequest{Card: card, Marker: marker, Actor: actor})
	return err
}

func (s *verbs) ReleaseExpired(ctx context.Context, r board.ExpiredRelease) error {
	_, err := s.rpc.ReleaseExpired(ctx, &storepb.ReleaseExpiredRequest{
		Card: r.Card, Prev: tokenToPB(r.Prev), Cutoff: timeToPB(r.Cutoff), Actor: r.Actor, State: r.State,
	})
	return err
}

func moveToPB(m board.Move) *storepb.MoveRequest {
	return &storepb.MoveRequest{Card: m.Card, To: m.To, From: m.From, Reason: string(m.Reason), Actor: m.Actor}
}

func (s *verbs) SetState(ctx context.Context, m board.Move) error {
	_, err := s.rpc.SetState(ctx, moveToPB(m))
	return err
}

func (s *verbs) SetStateFrom(ctx context.Context, m board.Move) (bool, error) {
	r, err := s.rpc.SetStateFrom(ctx, moveToPB(m))
	if err != nil {
		return false, err
	}
	return r.GetChanged(), nil
}

func (s *verbs) Reopen(ctx context.Context, m board.Move) error {
	_, err := s.rpc.Reopen(ctx, moveToPB(m))
	return err
}

func (s *verbs) AdjustLabels(ctx context.Context, c board.LabelChange) (board.Card, error) {
	r, err := s.rpc.AdjustLabels(ctx, &storepb.AdjustLabelsRequest{
		Card: c.Card, Add: stringsToPB(c.Add), Remove: stringsToPB(c.Remove), Actor: c.Actor,
	})
	if err != nil {
		return board.Card{}, err
	}
	return cardFromPB(r.GetCard()), nil
}

func (s *verbs) SetLabels(ctx context.Context, card string, labels []string, actor string) (board.Card, error) {
	r, err := s.rpc.SetLabels(ctx, &storepb.SetLabelsRequest{Card: card, Labels: stringsToPB(labels), Actor: actor})
	if err != nil {
		return board.Card{}, err
	}
	return cardFromPB(r.GetCard()), nil
}

func (s *verbs) CreateRun(ctx context.Context, run board.NewRun) (board.Run, error) {
	r, err := s.rpc.CreateRun(ctx, newRunToPB(run))
	if err != nil {
		return board.Run{}, err
	}
	return runFromPB(r), nil
}

func (s *verbs) UpdateRun(ctx context.Context, u board.RunUpdate) (board.Run, error) {
	r, err := s.rpc.UpdateRun(ctx, runUpdateToPB(u))
	if err != nil {
		return board.Run{}, err
	}
	return runFromPB(r), nil
}

func (s *verbs) GetRun(ctx context.Context, id string) (board.Run, error) {
	r, err := s.rpc.GetRun(ctx, &storepb.GetRunRequest{Id: id})
	if err != nil {
		return board.Run{}, err
	}
	return runFromPB(r), nil
}

func (s *verbs) Now(ctx context.Context) (time.Time, error) {
	r, err := s.rpc.Now(ctx, &storepb.Empty{})
	if err != nil {
		return time.Time{}, err
	}
	return timeFromPB(r), nil
}

func (s *verbs) ListExpiredClaimCandidates(ctx context.Context, q board.ExpiredQuery) (board.ExpiredPage, error) {
	req := &storepb.ListExpiredRequest{Cutoff: timeToPB(q.Cutoff), Limit: int64(q.Limit), After: q.After}
	if q.Share != nil {
		req.ShareReaper, req.ShareIntervalNs = q.Share.Reaper, int64(q.Share.Interval)
	}
	r, err := s.rpc.ListExpiredClaimCandidates(ctx, req)
	if err != nil {
		return board.ExpiredPage{}, err
	}
	page := board.ExpiredPage{Next: r.GetNext(), Reapers: int(r.GetReapers()), ShareIndex: int(r.GetShareIndex()), ShareError: r.GetShareError()}
	for _, c := range r.GetCards() {
		page.Cards = append(page.Cards, cardFromPB(c))
	}
	return page, nil
}

func (s *verbs) ListUnleasedRunningClaims(ctx context.Context, cutoff time.Time, limit int) ([]board.Card, error) {
	r, err := s.rpc.ListUnleasedRunningClaims(ctx, &storepb.ListCutoffRequest{Cutoff: timeToPB(cutoff), Limit: int64(limit)})
	if err != nil {
		return nil, err
	}
	return cardsFromPB(r), nil
}

func (s *verbs) ReclaimExpired(ctx context.Context, rc board.Reclaim) (board.Card, board.ClaimToken, error) {
	r, err := s.rpc.ReclaimExpired(ctx, &storepb.ReclaimExpiredRequest{
		Card: rc.Card, Prev: tokenToPB(rc.Prev), RecoveryMarker: rc.RecoveryMarker,
		Cutoff: timeToPB(rc.Cutoff), LeaseNanos: int64(rc.Lease),
	})
	if err != nil {
		return board.Card{}, board.ClaimToken{}, err
	}
	return cardFromPB(r.GetCard()), tokenFromPB(r.GetToken()), nil
}

func (s *verbs) Events(ctx context.Context, after int64, limit int) ([]board.Event, error) {
	r, err := s.rpc.Events(ctx, &storepb.EventsRequest{After: after, Limit: int64(limit)})
	if err != nil {
		return nil, err
	}
	if r.GetNil() {
		return nil, nil
	}
	out := make([]board.Event, 0, len(r.GetEvents()))
	for _, e := range r.GetEvents() {
		out = append(out, eventFromPB(e))
	}
	return out, nil
}

// Close ends the Calls stream, if any. The connection belongs to the
// plugin client, and the plugin process closes its store when it is
// stopped (Proxy.Close).
func (s *remoteStore) Close() error {
	if s.calls != nil {
		s.calls.close()
	}
	return nil
}

// retryWrite names what of the retry policy (DESIGN.md#retries) args
// carries that a plugin from before protocol 7 would silently drop; ""
// when nothing. The guard that sits under every call refuses those
// (versionGuard.Invoke).
func retryWrite(args any) string {
	switch r := args.(type) {
	case *storepb.CreateCardRequest:
		if r.GetRetry() != nil {
			return "the card's retry policy"
		}
	case *storepb.FinishRequest:
		if r.GetRetryable() {
			return "a retryable verdict"
		}
	case *storepb.SetStateOwnedRequest:
		if r.GetRetry() {
			return "a retry's backoff"
		}
	case *storepb.SetBoardRequest:
		if r.GetNext().GetRetry() != nil {
			return "the board's retry policy"
		}
	}
	return ""
}
