package wire

//go:generate go run ../../../internal/storegen -layer wire -root ../../..

import (
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// The conversions below mirror the board types field for field. They keep
// two distinctions a naive mapping loses: the zero time.Time (an absent Time)
// and a nil slice against an empty one (an absent Strings).

func ToTime(t time.Time) *storepb.Time {
	if t.IsZero() {
		return nil
	}
	return &storepb.Time{Seconds: t.Unix(), Nanos: int32(t.Nanosecond())}
}

// FromTime returns UTC: a time zone does not cross a process boundary, and
// every store stamps UTC anyway.
func FromTime(t *storepb.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Unix(t.Seconds, int64(t.Nanos)).UTC()
}

func ToStrings(s []string) *storepb.Strings {
	if s == nil {
		return nil
	}
	return &storepb.Strings{Values: s}
}

func FromStrings(s *storepb.Strings) []string {
	if s == nil {
		return nil
	}
	if s.Values == nil {
		return []string{}
	}
	return s.Values
}

func ToBoardMessage(b board.Board) *storepb.BoardMessage {
	out := &storepb.BoardMessage{States: make([]*storepb.State, 0, len(b.States))}
	for _, s := range b.States {
		out.States = append(out.States, &storepb.State{
			Name: s.Name, Pool: s.Pool, Launch: s.Launch, Running: s.Running,
			Terminal: s.Terminal, Completion: s.Completion, RetiringInto: s.RetiringInto,
		})
	}
	out.Retry = ToRetryPolicy(&b.Retry)
	return out
}

// ToRetryPolicy is a retry policy on the wire; nil (absent) for none or one
// that sets nothing.
func ToRetryPolicy(p *board.RetryPolicy) *storepb.RetryPolicy {
	if p == nil || p.IsZero() {
		return nil
	}
	return &storepb.RetryPolicy{MaxAttempts: int64(p.MaxAttempts), BackoffNanos: int64(p.Backoff), BackoffMaxNanos: int64(p.BackoffMax)}
}

func FromRetryPolicy(p *storepb.RetryPolicy) *board.RetryPolicy {
	if p == nil {
		return nil
	}
	return &board.RetryPolicy{MaxAttempts: int(p.GetMaxAttempts()), Backoff: time.Duration(p.GetBackoffNanos()), BackoffMax: time.Duration(p.GetBackoffMaxNanos())}
}

func FromBoardMessage(b *storepb.BoardMessage) board.Board {
	var out board.Board
	for _, s := range b.GetStates() {
		out.States = append(out.States, board.State{
			Name: s.GetName(), Pool: s.GetPool(), Launch: s.GetLaunch(), Running: s.GetRunning(),
			Terminal: s.GetTerminal(), Completion: s.GetCompletion(), RetiringInto: s.GetRetiringInto(),
		})
	}
	if p := FromRetryPolicy(b.GetRetry()); p != nil {
		out.Retry = *p
	}
	return out
}

func ToClaimToken(t board.ClaimToken) *storepb.ClaimToken {
	return &storepb.ClaimToken{Marker: t.Marker, Epoch: t.Epoch}
}

func FromClaimToken(t *storepb.ClaimToken) board.ClaimToken {
	return board.ClaimToken{Marker: t.GetMarker(), Epoch: t.GetEpoch()}
}

func ToGaveUp(g *board.GaveUp) *storepb.GaveUp {
	if g == nil {
		return nil
	}
	return &storepb.GaveUp{RunId: g.RunID, State: g.State, Attempts: int64(g.Attempts), Reason: g.Reason, At: ToTime(g.At)}
}

func FromGaveUp(g *storepb.GaveUp) *board.GaveUp {
	if g == nil {
		return nil
	}
	return &board.GaveUp{RunID: g.GetRunId(), State: g.GetState(), Attempts: int(g.GetAttempts()), Reason: g.GetReason(), At: FromTime(g.GetAt())}
}

func ToCard(c board.Card) *storepb.Card {
	return &storepb.Card{
		Id:              c.ID,
		Title:           c.Title,
		State:           c.State,
		Labels:          ToStrings(c.Labels),
		DependsOn:       ToStrings(c.DependsOn),
		LastRunId:       c.LastRunID,
		Runs:            ToStrings(c.Runs),
		AwaitingInput:   c.AwaitingInput,
		GaveUp:          ToGaveUp(c.GaveUp),
		StateReason:     string(c.StateReason),
		CreatedAt:       ToTime(c.CreatedAt),
		UpdatedAt:       ToTime(c.UpdatedAt),
		PromotedBy:      c.PromotedBy,
		Claim:           c.Claim,
		ClaimEpoch:      c.ClaimEpoch,
		ClaimedAt:       ToTime(c.ClaimedAt),
		ClaimLeaseUntil: ToTime(c.ClaimLeaseUntil),
		RecoveredEpoch:  c.RecoveredEpoch,
		DisownedEpoch:   c.DisownedEpoch,
		LastRunEpoch:    c.LastRunEpoch,
		Attempts:        int64(c.Attempts),
		RetryAt:         ToTime(c.RetryAt),
		Retry:           ToRetryPolicy(c.Retry),
	}
}

func FromCard(c *storepb.Card) board.Card {
	if c == nil {
		return board.Card{}
	}
	return board.Card{
		ID:              c.GetId(),
		Title:           c.GetTitle(),
		State:           c.GetState(),
		Labels:          FromStrings(c.GetLabels()),
		DependsOn:       FromStrings(c.GetDependsOn()),
		LastRunID:       c.GetLastRunId(),
		Runs:            FromStrings(c.GetRuns()),
		AwaitingInput:   c.GetAwaitingInput(),
		GaveUp:          FromGaveUp(c.GetGaveUp()),
		StateReason:     board.Reason(c.GetStateReason()),
		CreatedAt:       FromTime(c.GetCreatedAt()),
		UpdatedAt:       FromTime(c.GetUpdatedAt()),
		PromotedBy:      c.GetPromotedBy(),
		Claim:           c.GetClaim(),
		ClaimEpoch:      c.GetClaimEpoch(),
		ClaimedAt:       FromTime(c.GetClaimedAt()),
		ClaimLeaseUntil: FromTime(c.GetClaimLeaseUntil()),
		RecoveredEpoch:  c.GetRecoveredEpoch(),
		DisownedEpoch:   c.GetDisownedEpoch(),
		LastRunEpoch:    c.GetLastRunEpoch(),
		Attempts:        int(c.GetAttempts()),
		RetryAt:         FromTime(c.GetRetryAt()),
		Retry:           FromRetryPolicy(c.GetRetry()),
	}
}

func ToCardsReply(cs []board.Card) *storepb.CardsReply {
	out := &storepb.CardsReply{Nil: cs == nil, Cards: make([]*storepb.Card, 0, len(cs))}
	for _, c := range cs {
		out.Cards = append(out.Cards, ToCard(c))
	}
	return out
}

func FromCardsReply(r *storepb.CardsReply) []board.Card {
	if r.GetNil() {
		return nil
	}
	out := make([]board.Card, 0, len(r.GetCards()))
	for _, c := range r.GetCards() {
		out = append(out, FromCard(c))
	}
	return out
}

func ToRunMessage(r board.Run) *storepb.RunMessage {
	return &storepb.RunMessage{
		Id:            r.ID,
		Card:          r.Card,
		Status:        string(r.Status),
		Continuation:  string(r.Continuation),
		FailureCode:   r.FailureCode,
		Checkpoint:    r.Checkpoint,
		Owner:         r.Owner,
		Epoch:         r.Epoch,
		Host:          r.Host,
		Pid:           int64(r.PID),
		PidStart:      r.PIDStart,
		PidStartTicks: r.PIDStartTicks,
		BootId:        r.BootID,
		StartedFrom:   r.StartedFrom,
		Retryable:     r.RetryableFailure,
		CreatedAt:     ToTime(r.CreatedAt),
		UpdatedAt:     ToTime(r.UpdatedAt),
	}
}

func FromRunMessage(r *storepb.RunMessage) board.Run {
	return board.Run{
		ID:               r.GetId(),
		Card:             r.GetCard(),
		Status:           board.RunStatus(r.GetStatus()),
		Continuation:     board.Continuation(r.GetContinuation()),
		FailureCode:      r.GetFailureCode(),
		Checkpoint:       r.GetCheckpoint(),
		Owner:            r.GetOwner(),
		Epoch:            r.GetEpoch(),
		Host:             r.GetHost(),
		PID:              int(r.GetPid()),
		PIDStart:         r.GetPidStart(),
		PIDStartTicks:    r.GetPidStartTicks(),
		BootID:           r.GetBootId(),
		StartedFrom:      r.GetStartedFrom(),
		RetryableFailure: r.GetRetryable(),
		CreatedAt:        FromTime(r.GetCreatedAt()),
		UpdatedAt:        FromTime(r.GetUpdatedAt()),
	}
}

func ToRunUpdateRequest(u board.UpdateRunParams) *storepb.RunUpdateRequest {
	out := &storepb.RunUpdateRequest{Id: u.ID, Token: ToClaimToken(u.Token), FailureCode: u.FailureCode, Checkpoint: u.Checkpoint, Actor: u.Actor}
	if u.IfStatus != nil {
		s := string(*u.IfStatus)
		out.IfStatus = &s
	}
	if u.Status != nil {
		s := string(*u.Status)
		out.Status = &s
	}
	if u.Continuation != nil {
		s := string(*u.Continuation)
		out.Continuation = &s
	}
	return out
}

func FromRunUpdateRequest(u *storepb.RunUpdateRequest) board.UpdateRunParams {
	out := board.UpdateRunParams{ID: u.GetId(), Token: FromClaimToken(u.GetToken()), FailureCode: u.FailureCode, Checkpoint: u.Checkpoint, Actor: u.GetActor()}
	if u.IfStatus != nil {
		s := board.RunStatus(*u.IfStatus)
		out.IfStatus = &s
	}
	if u.Status != nil {
		s := board.RunStatus(*u.Status)
		out.Status = &s
	}
	if u.Continuation != nil {
		c := board.Continuation(*u.Continuation)
		out.Continuation = &c
	}
	return out
}

func ToEvent(e board.Event) *storepb.Event {
	d := e.Data
	return &storepb.Event{
		Seq:    e.Seq,
		Type:   string(e.Type),
		Card:   e.Card,
		Reason: string(e.Reason),
		Actor:  e.Actor,
		At:     ToTime(e.At),
		Data: &storepb.EventData{
			From: d.From, To: d.To, Marker: d.Marker, Epoch: d.Epoch,
			Labels: ToStrings(d.Labels), Added: ToStrings(d.Added), Removed: ToStrings(d.Removed),
			RunId: d.RunID, Status: d.Status, Value: d.Value,
		},
	}
}

func FromEvent(e *storepb.Event) board.Event {
	d := e.GetData()
	return board.Event{
		Seq:    e.GetSeq(),
		Type:   board.EventType(e.GetType()),
		Card:   e.GetCard(),
		Reason: board.Reason(e.GetReason()),
		Actor:  e.GetActor(),
		At:     FromTime(e.GetAt()),
		Data: board.EventData{
			From: d.GetFrom(), To: d.GetTo(), Marker: d.GetMarker(), Epoch: d.GetEpoch(),
			Labels: FromStrings(d.GetLabels()), Added: FromStrings(d.GetAdded()), Removed: FromStrings(d.GetRemoved()),
			RunID: d.GetRunId(), Status: d.GetStatus(), Value: d.GetValue(),
		},
	}
}
