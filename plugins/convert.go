package plugins

import (
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// The conversions below mirror the board types field for field. They keep
// two distinctions a naive mapping loses: the zero time.Time (an absent Time)
// and a nil slice against an empty one (an absent Strings).

func toTime(t time.Time) *storepb.Time {
	if t.IsZero() {
		return nil
	}
	return &storepb.Time{Seconds: t.Unix(), Nanos: int32(t.Nanosecond())}
}

// fromTime returns UTC: a time zone does not cross a process boundary, and
// every store stamps UTC anyway.
func fromTime(t *storepb.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Unix(t.Seconds, int64(t.Nanos)).UTC()
}

func toStrings(s []string) *storepb.Strings {
	if s == nil {
		return nil
	}
	return &storepb.Strings{Values: s}
}

func fromStrings(s *storepb.Strings) []string {
	if s == nil {
		return nil
	}
	if s.Values == nil {
		return []string{}
	}
	return s.Values
}

func toBoardMessage(b board.Board) *storepb.BoardMessage {
	out := &storepb.BoardMessage{States: make([]*storepb.State, 0, len(b.States))}
	for _, s := range b.States {
		out.States = append(out.States, &storepb.State{
			Name: s.Name, Pool: s.Pool, Launch: s.Launch, Running: s.Running,
			Terminal: s.Terminal, Completion: s.Completion, RetiringInto: s.RetiringInto,
		})
	}
	out.Retry = toRetryPolicy(&b.Retry)
	return out
}

// toRetryPolicy is a retry policy on the wire; nil (absent) for none or one
// that sets nothing.
func toRetryPolicy(p *board.RetryPolicy) *storepb.RetryPolicy {
	if p == nil || p.IsZero() {
		return nil
	}
	return &storepb.RetryPolicy{MaxAttempts: int64(p.MaxAttempts), BackoffNanos: int64(p.Backoff), BackoffMaxNanos: int64(p.BackoffMax)}
}

func fromRetryPolicy(p *storepb.RetryPolicy) *board.RetryPolicy {
	if p == nil {
		return nil
	}
	return &board.RetryPolicy{MaxAttempts: int(p.GetMaxAttempts()), Backoff: time.Duration(p.GetBackoffNanos()), BackoffMax: time.Duration(p.GetBackoffMaxNanos())}
}

func fromBoardMessage(b *storepb.BoardMessage) board.Board {
	var out board.Board
	for _, s := range b.GetStates() {
		out.States = append(out.States, board.State{
			Name: s.GetName(), Pool: s.GetPool(), Launch: s.GetLaunch(), Running: s.GetRunning(),
			Terminal: s.GetTerminal(), Completion: s.GetCompletion(), RetiringInto: s.GetRetiringInto(),
		})
	}
	if p := fromRetryPolicy(b.GetRetry()); p != nil {
		out.Retry = *p
	}
	return out
}

func toClaimToken(t board.ClaimToken) *storepb.ClaimToken {
	return &storepb.ClaimToken{Marker: t.Marker, Epoch: t.Epoch}
}

func fromClaimToken(t *storepb.ClaimToken) board.ClaimToken {
	return board.ClaimToken{Marker: t.GetMarker(), Epoch: t.GetEpoch()}
}

func toGaveUp(g *board.GaveUp) *storepb.GaveUp {
	if g == nil {
		return nil
	}
	return &storepb.GaveUp{RunId: g.RunID, State: g.State, Attempts: int64(g.Attempts), Reason: g.Reason, At: toTime(g.At)}
}

func fromGaveUp(g *storepb.GaveUp) *board.GaveUp {
	if g == nil {
		return nil
	}
	return &board.GaveUp{RunID: g.GetRunId(), State: g.GetState(), Attempts: int(g.GetAttempts()), Reason: g.GetReason(), At: fromTime(g.GetAt())}
}

func toCard(c board.Card) *storepb.Card {
	return &storepb.Card{
		Id:              c.ID,
		Title:           c.Title,
		State:           c.State,
		Labels:          toStrings(c.Labels),
		DependsOn:       toStrings(c.DependsOn),
		LastRunId:       c.LastRunID,
		Runs:            toStrings(c.Runs),
		AwaitingInput:   c.AwaitingInput,
		GaveUp:          toGaveUp(c.GaveUp),
		StateReason:     string(c.StateReason),
		CreatedAt:       toTime(c.CreatedAt),
		UpdatedAt:       toTime(c.UpdatedAt),
		PromotedBy:      c.PromotedBy,
		Claim:           c.Claim,
		ClaimEpoch:      c.ClaimEpoch,
		ClaimedAt:       toTime(c.ClaimedAt),
		ClaimLeaseUntil: toTime(c.ClaimLeaseUntil),
		RecoveredEpoch:  c.RecoveredEpoch,
		LastRunEpoch:    c.LastRunEpoch,
		Attempts:        int64(c.Attempts),
		RetryAt:         toTime(c.RetryAt),
		Retry:           toRetryPolicy(c.Retry),
	}
}

func fromCard(c *storepb.Card) board.Card {
	if c == nil {
		return board.Card{}
	}
	return board.Card{
		ID:              c.GetId(),
		Title:           c.GetTitle(),
		State:           c.GetState(),
		Labels:          fromStrings(c.GetLabels()),
		DependsOn:       fromStrings(c.GetDependsOn()),
		LastRunID:       c.GetLastRunId(),
		Runs:            fromStrings(c.GetRuns()),
		AwaitingInput:   c.GetAwaitingInput(),
		GaveUp:          fromGaveUp(c.GetGaveUp()),
		StateReason:     board.Reason(c.GetStateReason()),
		CreatedAt:       fromTime(c.GetCreatedAt()),
		UpdatedAt:       fromTime(c.GetUpdatedAt()),
		PromotedBy:      c.GetPromotedBy(),
		Claim:           c.GetClaim(),
		ClaimEpoch:      c.GetClaimEpoch(),
		ClaimedAt:       fromTime(c.GetClaimedAt()),
		ClaimLeaseUntil: fromTime(c.GetClaimLeaseUntil()),
		RecoveredEpoch:  c.GetRecoveredEpoch(),
		LastRunEpoch:    c.GetLastRunEpoch(),
		Attempts:        int(c.GetAttempts()),
		RetryAt:         fromTime(c.GetRetryAt()),
		Retry:           fromRetryPolicy(c.GetRetry()),
	}
}

func toCardsReply(cs []board.Card) *storepb.CardsReply {
	out := &storepb.CardsReply{Nil: cs == nil, Cards: make([]*storepb.Card, 0, len(cs))}
	for _, c := range cs {
		out.Cards = append(out.Cards, toCard(c))
	}
	return out
}

func fromCardsReply(r *storepb.CardsReply) []board.Card {
	if r.GetNil() {
		return nil
	}
	out := make([]board.Card, 0, len(r.GetCards()))
	for _, c := range r.GetCards() {
		out = append(out, fromCard(c))
	}
	return out
}

func toRunMessage(r board.Run) *storepb.RunMessage {
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
		CreatedAt:     toTime(r.CreatedAt),
		UpdatedAt:     toTime(r.UpdatedAt),
	}
}

func fromRunMessage(r *storepb.RunMessage) board.Run {
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
		CreatedAt:        fromTime(r.GetCreatedAt()),
		UpdatedAt:        fromTime(r.GetUpdatedAt()),
	}
}

func toRunUpdateRequest(u board.UpdateRunParams) *storepb.RunUpdateRequest {
	out := &storepb.RunUpdateRequest{Id: u.ID, Token: toClaimToken(u.Token), FailureCode: u.FailureCode, Checkpoint: u.Checkpoint, Actor: u.Actor}
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

func fromRunUpdateRequest(u *storepb.RunUpdateRequest) board.UpdateRunParams {
	out := board.UpdateRunParams{ID: u.GetId(), Token: fromClaimToken(u.GetToken()), FailureCode: u.FailureCode, Checkpoint: u.Checkpoint, Actor: u.GetActor()}
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

func toEvent(e board.Event) *storepb.Event {
	d := e.Data
	return &storepb.Event{
		Seq:    e.Seq,
		Type:   string(e.Type),
		Card:   e.Card,
		Reason: string(e.Reason),
		Actor:  e.Actor,
		At:     toTime(e.At),
		Data: &storepb.EventData{
			From: d.From, To: d.To, Marker: d.Marker, Epoch: d.Epoch,
			Labels: toStrings(d.Labels), Added: toStrings(d.Added), Removed: toStrings(d.Removed),
			RunId: d.RunID, Status: d.Status, Value: d.Value,
		},
	}
}

func fromEvent(e *storepb.Event) board.Event {
	d := e.GetData()
	return board.Event{
		Seq:    e.GetSeq(),
		Type:   board.EventType(e.GetType()),
		Card:   e.GetCard(),
		Reason: board.Reason(e.GetReason()),
		Actor:  e.GetActor(),
		At:     fromTime(e.GetAt()),
		Data: board.EventData{
			From: d.GetFrom(), To: d.GetTo(), Marker: d.GetMarker(), Epoch: d.GetEpoch(),
			Labels: fromStrings(d.GetLabels()), Added: fromStrings(d.GetAdded()), Removed: fromStrings(d.GetRemoved()),
			RunID: d.GetRunId(), Status: d.GetStatus(), Value: d.GetValue(),
		},
	}
}

func toStartRequest(r board.StartParams) *storepb.StartRequest {
	return &storepb.StartRequest{Card: r.Card, Next: r.Next, Marker: r.Marker, LeaseNanos: int64(r.Lease), Run: toRunMessage(r.Run), Fresh: r.Fresh, Labels: r.Labels}
}

func fromStartRequest(r *storepb.StartRequest) board.StartParams {
	return board.StartParams{Card: r.GetCard(), Next: r.GetNext(), Marker: r.GetMarker(), Lease: time.Duration(r.GetLeaseNanos()), Run: fromRunMessage(r.GetRun()), Fresh: r.GetFresh(), Labels: r.GetLabels()}
}

func toStartedReply(s board.StartResult) *storepb.StartedReply {
	return &storepb.StartedReply{Card: toCard(s.Card), Token: toClaimToken(s.Token), Run: toRunMessage(s.Run), Resumed: s.Resumed}
}

func fromStartedReply(s *storepb.StartedReply) board.StartResult {
	return board.StartResult{Card: fromCard(s.GetCard()), Token: fromClaimToken(s.GetToken()), Run: fromRunMessage(s.GetRun()), Resumed: s.GetResumed()}
}

func toFinishRequest(r board.FinishParams) *storepb.FinishRequest {
	return &storepb.FinishRequest{Card: r.Card, Token: toClaimToken(r.Token), RunId: r.RunID, Status: string(r.Status), FailureCode: r.FailureCode, Checkpoint: r.Checkpoint, Retryable: r.Retryable}
}

func fromFinishRequest(r *storepb.FinishRequest) board.FinishParams {
	return board.FinishParams{Card: r.GetCard(), Token: fromClaimToken(r.GetToken()), RunID: r.GetRunId(), Status: board.RunStatus(r.GetStatus()), FailureCode: r.GetFailureCode(), Checkpoint: r.Checkpoint, Retryable: r.GetRetryable()}
}

func toFinishedReply(f board.FinishResult) *storepb.FinishedReply {
	return &storepb.FinishedReply{Card: toCard(f.Card), Run: toRunMessage(f.Run)}
}

func fromFinishedReply(f *storepb.FinishedReply) board.FinishResult {
	return board.FinishResult{Card: fromCard(f.GetCard()), Run: fromRunMessage(f.GetRun())}
}

func toNewRunRequest(r board.CreateRunParams) *storepb.NewRunRequest {
	return &storepb.NewRunRequest{Token: toClaimToken(r.Token), Run: toRunMessage(r.Run)}
}

func fromNewRunRequest(r *storepb.NewRunRequest) board.CreateRunParams {
	return board.CreateRunParams{Token: fromClaimToken(r.GetToken()), Run: fromRunMessage(r.GetRun())}
}
