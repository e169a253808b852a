package plugins

import (
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// The conversions below mirror the board types field for field. They keep
// two distinctions a naive mapping loses: the zero time.Time (an absent Time)
// and a nil slice against an empty one (an absent Strings).

func timeToPB(t time.Time) *storepb.Time {
	if t.IsZero() {
		return nil
	}
	return &storepb.Time{Seconds: t.Unix(), Nanos: int32(t.Nanosecond())}
}

// timeFromPB returns UTC: a time zone does not cross a process boundary, and
// every store stamps UTC anyway.
func timeFromPB(t *storepb.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Unix(t.Seconds, int64(t.Nanos)).UTC()
}

func stringsToPB(s []string) *storepb.Strings {
	if s == nil {
		return nil
	}
	return &storepb.Strings{Values: s}
}

func stringsFromPB(s *storepb.Strings) []string {
	if s == nil {
		return nil
	}
	if s.Values == nil {
		return []string{}
	}
	return s.Values
}

func boardToPB(b board.Board) *storepb.BoardMessage {
	out := &storepb.BoardMessage{States: make([]*storepb.State, 0, len(b.States))}
	for _, s := range b.States {
		out.States = append(out.States, &storepb.State{
			Name: s.Name, Pool: s.Pool, Launch: s.Launch, Running: s.Running,
			Terminal: s.Terminal, Completion: s.Completion, RetiringInto: s.RetiringInto,
		})
	}
	out.Retry = retryToPB(&b.Retry)
	return out
}

// retryToPB is a retry policy on the wire; nil (absent) for none or one
// that sets nothing.
func retryToPB(p *board.RetryPolicy) *storepb.RetryPolicy {
	if p == nil || p.IsZero() {
		return nil
	}
	return &storepb.RetryPolicy{MaxAttempts: int64(p.MaxAttempts), BackoffNanos: int64(p.Backoff), BackoffMaxNanos: int64(p.BackoffMax)}
}

func retryFromPB(p *storepb.RetryPolicy) *board.RetryPolicy {
	if p == nil {
		return nil
	}
	return &board.RetryPolicy{MaxAttempts: int(p.GetMaxAttempts()), Backoff: time.Duration(p.GetBackoffNanos()), BackoffMax: time.Duration(p.GetBackoffMaxNanos())}
}

func boardFromPB(b *storepb.BoardMessage) board.Board {
	var out board.Board
	for _, s := range b.GetStates() {
		out.States = append(out.States, board.State{
			Name: s.GetName(), Pool: s.GetPool(), Launch: s.GetLaunch(), Running: s.GetRunning(),
			Terminal: s.GetTerminal(), Completion: s.GetCompletion(), RetiringInto: s.GetRetiringInto(),
		})
	}
	if p := retryFromPB(b.GetRetry()); p != nil {
		out.Retry = *p
	}
	return out
}

func tokenToPB(t board.ClaimToken) *storepb.ClaimToken {
	return &storepb.ClaimToken{Marker: t.Marker, Epoch: t.Epoch}
}

func tokenFromPB(t *storepb.ClaimToken) board.ClaimToken {
	return board.ClaimToken{Marker: t.GetMarker(), Epoch: t.GetEpoch()}
}

func gaveUpToPB(g *board.GaveUp) *storepb.GaveUp {
	if g == nil {
		return nil
	}
	return &storepb.GaveUp{RunId: g.RunID, State: g.State, Attempts: int64(g.Attempts), Reason: g.Reason, At: timeToPB(g.At)}
}

func gaveUpFromPB(g *storepb.GaveUp) *board.GaveUp {
	if g == nil {
		return nil
	}
	return &board.GaveUp{RunID: g.GetRunId(), State: g.GetState(), Attempts: int(g.GetAttempts()), Reason: g.GetReason(), At: timeFromPB(g.GetAt())}
}

func cardToPB(c board.Card) *storepb.Card {
	return &storepb.Card{
		Id:              c.ID,
		Title:           c.Title,
		State:           c.State,
		Labels:          stringsToPB(c.Labels),
		DependsOn:       stringsToPB(c.DependsOn),
		LastRunId:       c.LastRunID,
		Runs:            stringsToPB(c.Runs),
		AwaitingInput:   c.AwaitingInput,
		GaveUp:          gaveUpToPB(c.GaveUp),
		StateReason:     string(c.StateReason),
		CreatedAt:       timeToPB(c.CreatedAt),
		UpdatedAt:       timeToPB(c.UpdatedAt),
		PromotedBy:      c.PromotedBy,
		Claim:           c.Claim,
		ClaimEpoch:      c.ClaimEpoch,
		ClaimedAt:       timeToPB(c.ClaimedAt),
		ClaimLeaseUntil: timeToPB(c.ClaimLeaseUntil),
		RecoveredEpoch:  c.RecoveredEpoch,
		LastRunEpoch:    c.LastRunEpoch,
		Attempts:        int64(c.Attempts),
		RetryAt:         timeToPB(c.RetryAt),
		Retry:           retryToPB(c.Retry),
	}
}

func cardFromPB(c *storepb.Card) board.Card {
	if c == nil {
		return board.Card{}
	}
	return board.Card{
		ID:              c.GetId(),
		Title:           c.GetTitle(),
		State:           c.GetState(),
		Labels:          stringsFromPB(c.GetLabels()),
		DependsOn:       stringsFromPB(c.GetDependsOn()),
		LastRunID:       c.GetLastRunId(),
		Runs:            stringsFromPB(c.GetRuns()),
		AwaitingInput:   c.GetAwaitingInput(),
		GaveUp:          gaveUpFromPB(c.GetGaveUp()),
		StateReason:     board.Reason(c.GetStateReason()),
		CreatedAt:       timeFromPB(c.GetCreatedAt()),
		UpdatedAt:       timeFromPB(c.GetUpdatedAt()),
		PromotedBy:      c.GetPromotedBy(),
		Claim:           c.GetClaim(),
		ClaimEpoch:      c.GetClaimEpoch(),
		ClaimedAt:       timeFromPB(c.GetClaimedAt()),
		ClaimLeaseUntil: timeFromPB(c.GetClaimLeaseUntil()),
		RecoveredEpoch:  c.GetRecoveredEpoch(),
		LastRunEpoch:    c.GetLastRunEpoch(),
		Attempts:        int(c.GetAttempts()),
		RetryAt:         timeFromPB(c.GetRetryAt()),
		Retry:           retryFromPB(c.GetRetry()),
	}
}

func cardsToPB(cs []board.Card) *storepb.CardsReply {
	out := &storepb.CardsReply{Nil: cs == nil, Cards: make([]*storepb.Card, 0, len(cs))}
	for _, c := range cs {
		out.Cards = append(out.Cards, cardToPB(c))
	}
	return out
}

func cardsFromPB(r *storepb.CardsReply) []board.Card {
	if r.GetNil() {
		return nil
	}
	out := make([]board.Card, 0, len(r.GetCards()))
	for _, c := range r.GetCards() {
		out = append(out, cardFromPB(c))
	}
	return out
}

func runToPB(r board.Run) *storepb.RunMessage {
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
		CreatedAt:     timeToPB(r.CreatedAt),
		UpdatedAt:     timeToPB(r.UpdatedAt),
	}
}

func runFromPB(r *storepb.RunMessage) board.Run {
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
		CreatedAt:        timeFromPB(r.GetCreatedAt()),
		UpdatedAt:        timeFromPB(r.GetUpdatedAt()),
	}
}

func runUpdateToPB(u board.RunUpdate) *storepb.RunUpdateRequest {
	out := &storepb.RunUpdateRequest{Id: u.ID, Token: tokenToPB(u.Token), FailureCode: u.FailureCode, Checkpoint: u.Checkpoint, Actor: u.Actor}
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

func runUpdateFromPB(u *storepb.RunUpdateRequest) board.RunUpdate {
	out := board.RunUpdate{ID: u.GetId(), Token: tokenFromPB(u.GetToken()), FailureCode: u.FailureCode, Checkpoint: u.Checkpoint, Actor: u.GetActor()}
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

func eventToPB(e board.Event) *storepb.Event {
	d := e.Data
	return &storepb.Event{
		Seq:    e.Seq,
		Type:   string(e.Type),
		Card:   e.Card,
		Reason: string(e.Reason),
		Actor:  e.Actor,
		At:     timeToPB(e.At),
		Data: &storepb.EventData{
			From: d.From, To: d.To, Marker: d.Marker, Epoch: d.Epoch,
			Labels: stringsToPB(d.Labels), Added: stringsToPB(d.Added), Removed: stringsToPB(d.Removed),
			RunId: d.RunID, Status: d.Status, Value: d.Value,
		},
	}
}

func eventFromPB(e *storepb.Event) board.Event {
	d := e.GetData()
	return board.Event{
		Seq:    e.GetSeq(),
		Type:   board.EventType(e.GetType()),
		Card:   e.GetCard(),
		Reason: board.Reason(e.GetReason()),
		Actor:  e.GetActor(),
		At:     timeFromPB(e.GetAt()),
		Data: board.EventData{
			From: d.GetFrom(), To: d.GetTo(), Marker: d.GetMarker(), Epoch: d.GetEpoch(),
			Labels: stringsFromPB(d.GetLabels()), Added: stringsFromPB(d.GetAdded()), Removed: stringsFromPB(d.GetRemoved()),
			RunID: d.GetRunId(), Status: d.GetStatus(), Value: d.GetValue(),
		},
	}
}

func startToPB(r board.StartRequest) *storepb.StartRequest {
	return &storepb.StartRequest{Card: r.Card, Next: r.Next, Marker: r.Marker, LeaseNanos: int64(r.Lease), Run: runToPB(r.Run), Fresh: r.Fresh, Labels: r.Labels}
}

func startFromPB(r *storepb.StartRequest) board.StartRequest {
	return board.StartRequest{Card: r.GetCard(), Next: r.GetNext(), Marker: r.GetMarker(), Lease: time.Duration(r.GetLeaseNanos()), Run: runFromPB(r.GetRun()), Fresh: r.GetFresh(), Labels: r.GetLabels()}
}

func startedToPB(s board.Started) *storepb.StartedReply {
	return &storepb.StartedReply{Card: cardToPB(s.Card), Token: tokenToPB(s.Token), Run: runToPB(s.Run), Resumed: s.Resumed}
}

func startedFromPB(s *storepb.StartedReply) board.Started {
	return board.Started{Card: cardFromPB(s.GetCard()), Token: tokenFromPB(s.GetToken()), Run: runFromPB(s.GetRun()), Resumed: s.GetResumed()}
}

func finishToPB(r board.FinishRequest) *storepb.FinishRequest {
	return &storepb.FinishRequest{Card: r.Card, Token: tokenToPB(r.Token), RunId: r.RunID, Status: string(r.Status), FailureCode: r.FailureCode, Checkpoint: r.Checkpoint, Retryable: r.Retryable}
}

func finishFromPB(r *storepb.FinishRequest) board.FinishRequest {
	return board.FinishRequest{Card: r.GetCard(), Token: tokenFromPB(r.GetToken()), RunID: r.GetRunId(), Status: board.RunStatus(r.GetStatus()), FailureCode: r.GetFailureCode(), Checkpoint: r.Checkpoint, Retryable: r.GetRetryable()}
}

func finishedToPB(f board.Finished) *storepb.FinishedReply {
	return &storepb.FinishedReply{Card: cardToPB(f.Card), Run: runToPB(f.Run)}
}

func finishedFromPB(f *storepb.FinishedReply) board.Finished {
	return board.Finished{Card: cardFromPB(f.GetCard()), Run: runFromPB(f.GetRun())}
}

func newRunToPB(r board.NewRun) *storepb.NewRunRequest {
	return &storepb.NewRunRequest{Token: tokenToPB(r.Token), Run: runToPB(r.Run)}
}

func newRunFromPB(r *storepb.NewRunRequest) board.NewRun {
	return board.NewRun{Token: tokenFromPB(r.GetToken()), Run: runFromPB(r.GetRun())}
}
