package mongostore

import (
	"math"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/leasekeeper/leasekeeper/board"
)

// Stored documents are read field by field instead of through a struct
// decoder: a document another program wrote may hold a field of the wrong
// type, and the error must name the card and the field instead of
// failing somewhere inside the driver (or, worse, decoding to a zero that
// reads as "free" or "no lease").

// reader reads typed fields of one stored document. The first problem is
// kept in err and every later read returns a zero value.
type reader struct {
	raw    bson.Raw
	coll   string
	id     string
	prefix string // dotted path of a sub-document, for error messages
	err    error
}

func newReader(coll string, raw bson.Raw) *reader {
	r := &reader{raw: raw, coll: coll}
	v, err := raw.LookupErr("_id")
	switch {
	case err != nil:
		r.fail("_id", "missing")
	default:
		if s, ok := v.StringValueOK(); ok {
			r.id = s
		} else {
			r.id = v.String()
			r.fail("_id", "is "+v.Type.String()+", want string")
		}
	}
	return r
}

func (r *reader) fail(field, problem string) {
	if r.err == nil {
		r.err = &DocumentError{Collection: r.coll, ID: r.id, Field: r.prefix + field, Problem: problem}
	}
}

// value returns the field's value; ok is false when the field is missing
// or null (both read as "not set").
func (r *reader) value(key string) (bson.RawValue, bool) {
	if r.err != nil {
		return bson.RawValue{}, false
	}
	v, err := r.raw.LookupErr(key)
	if err != nil || v.Type == bson.TypeNull {
		return bson.RawValue{}, false
	}
	return v, true
}

// has reports whether the field is present and not null.
func (r *reader) has(key string) bool { _, ok := r.value(key); return ok }

func (r *reader) str(key string) string {
	v, ok := r.value(key)
	if !ok {
		return ""
	}
	s, ok := v.StringValueOK()
	if !ok {
		r.fail(key, "is "+v.Type.String()+", want string")
	}
	return s
}

// int reads an integer. Doubles holding an integral value are accepted:
// a shell or another driver may write numbers as doubles.
func (r *reader) int(key string) int64 {
	v, ok := r.value(key)
	if !ok {
		return 0
	}
	switch v.Type {
	case bson.TypeInt64:
		return v.Int64()
	case bson.TypeInt32:
		return int64(v.Int32())
	case bson.TypeDouble:
		f := v.Double()
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return int64(f)
		}
		r.fail(key, "is a non-integral double")
		return 0
	}
	r.fail(key, "is "+v.Type.String()+", want an integer")
	return 0
}

func (r *reader) boolean(key string) bool {
	v, ok := r.value(key)
	if !ok {
		return false
	}
	b, ok := v.BooleanOK()
	if !ok {
		r.fail(key, "is "+v.Type.String()+", want boolean")
	}
	return b
}

func (r *reader) time(key string) time.Time {
	v, ok := r.value(key)
	if !ok {
		return time.Time{}
	}
	ms, ok := v.DateTimeOK()
	if !ok {
		r.fail(key, "is "+v.Type.String()+", want a date")
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// strs reads an array of strings; missing reads as empty (never nil, so a
// card renders "labels": [] rather than null).
func (r *reader) strs(key string) []string {
	out := []string{}
	v, ok := r.value(key)
	if !ok {
		return out
	}
	arr, ok := v.ArrayOK()
	if !ok {
		r.fail(key, "is "+v.Type.String()+", want an array of strings")
		return out
	}
	vals, err := arr.Values()
	if err != nil {
		r.fail(key, "unreadable array: "+err.Error())
		return out
	}
	for _, e := range vals {
		s, ok := e.StringValueOK()
		if !ok {
			r.fail(key, "holds a "+e.Type.String()+", want only strings")
			return []string{}
		}
		out = append(out, s)
	}
	return out
}

// doc returns a sub-document reader sharing this reader's error slot.
func (r *reader) doc(key string) (*reader, bool) {
	v, ok := r.value(key)
	if !ok {
		return nil, false
	}
	d, ok := v.DocumentOK()
	if !ok {
		r.fail(key, "is "+v.Type.String()+", want a document")
		return nil, false
	}
	return &reader{raw: d, coll: r.coll, id: r.id, prefix: r.prefix + key + "."}, true
}

// cardState is a card as read, plus what the compare-and-set writes need to
// know about the stored document that board.Card cannot say.
type cardState struct {
	board.Card
	raw bson.Raw
	// epochSet is false when the document has no claim_epoch at all: such a
	// card refuses every fenced write (DESIGN.md#lost-fence).
	epochSet bool
	// leaseSet is false for a claim with no lease (legacy or stripped).
	leaseSet bool
	outbox   []outboxEntry
	// run is the card's embedded current run (see runs.go), nil when it
	// has none; runRev its revision.
	run    *board.Run
	runRev int64
	// reopenPending and reopenHolds are the Reopen/promotion exclusion's
	// bookkeeping (reopenOnce): the token of a Reopen of this card in
	// flight, and the tokens of Reopens of its blockers holding it.
	reopenPending string
	reopenHolds   []string
}

// holds reports whether tok is the card's current claim, fence included. A
// card whose epoch field is missing is held by nobody's token.
func (c *cardState) holds(tok board.ClaimToken) bool {
	return c.epochSet && c.Claim == tok.Marker && c.ClaimEpoch == tok.Epoch
}

func (c *cardState) conflict() error { return board.Conflict(c.ID, c.Claim, c.ClaimEpoch) }

func decodeCard(raw bson.Raw) (*cardState, error) {
	r := newReader(collCards, raw)
	c := &cardState{raw: raw}
	c.ID = r.id
	c.Title = r.str("title")
	c.State = r.str("state")
	c.Labels = r.strs("labels")
	c.DependsOn = r.strs("depends_on")
	c.LastRunID = r.str("last_run_id")
	c.LastRunEpoch = r.int("last_run_epoch")
	c.Runs = r.strs("runs")
	c.AwaitingInput = r.boolean("awaiting_input")
	if g, ok := r.doc("gave_up"); ok {
		c.GaveUp = &board.GaveUp{
			RunID:    g.str("run_id"),
			State:    g.str("state"),
			Attempts: int(g.int("attempts")),
			Reason:   g.str("reason"),
			At:       g.time("at"),
		}
		if g.err != nil {
			r.err = g.err
		}
	}
	c.StateReason = board.Reason(r.str("state_reason"))
	c.CreatedAt = r.time("created_at")
	c.UpdatedAt = r.time("updated_at")
	c.PromotedBy = r.str("promoted_by")
	// Absent from cards an older agent wrote: no attempts counted, no
	// backoff, the board's policy (DESIGN.md#retries).
	c.Attempts = int(r.int("attempts"))
	c.RetryAt = r.time("retry_at")
	if p, ok := r.doc("retry"); ok {
		c.Retry = &board.RetryPolicy{
			MaxAttempts: int(p.int("max_attempts")),
			Backoff:     time.Duration(p.int("backoff_ns")),
			BackoffMax:  time.Duration(p.int("backoff_max_ns")),
		}
		if p.err != nil {
			r.err = p.err
		}
	}
	c.Claim = r.str("claim")
	c.epochSet = r.has("claim_epoch")
	c.ClaimEpoch = r.int("claim_epoch")
	c.ClaimedAt = r.time("claimed_at")
	c.leaseSet = r.has("claim_lease_until")
	c.ClaimLeaseUntil = r.time("claim_lease_until")
	c.RecoveredEpoch = r.int("recovered_epoch")
	c.DisownedEpoch = r.int("disowned_epoch")
	c.reopenPending = r.str(fieldReopenPending)
	c.reopenHolds = r.strs(fieldReopenHolds)
	c.outbox = r.outbox()
	if d, ok := r.doc(fieldRun); ok {
		run := &board.Run{ID: d.str("id")}
		readRunFields(d, run)
		c.run, c.runRev = run, d.int("rev")
		if d.err != nil {
			r.err = d.err
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	if c.State == "" {
		return nil, &DocumentError{Collection: collCards, ID: c.ID, Field: "state", Problem: "missing"}
	}
	return c, nil
}

// runState is a run as read, plus its outbox.
type runState struct {
	board.Run
	raw    bson.Raw
	rev    int64
	outbox []outboxEntry
}

func decodeRun(raw bson.Raw) (*runState, error) {
	r := newReader(collRuns, raw)
	run := &runState{raw: raw}
	run.ID = r.id
	readRunFields(r, &run.Run)
	run.rev = r.int("rev")
	run.outbox = r.outbox()
	if r.err != nil {
		return nil, r.err
	}
	return run, nil
}

// readRunFields reads the fields of a run document but its id.
func readRunFields(r *reader, run *board.Run) {
	run.Card = r.str("card")
	run.Status = board.RunStatus(r.str("status"))
	run.Continuation = board.Continuation(r.str("continuation"))
	run.FailureCode = r.str("failure_code")
	run.Checkpoint = r.str("checkpoint")
	run.Owner = r.str("owner")
	run.Epoch = r.int("epoch")
	run.Host = r.str("host")
	run.PID = int(r.int("pid"))
	run.PIDStart = r.int("pid_start")
	// Absent from runs an older agent wrote: those are legacy runs.
	run.PIDStartTicks = r.int("pid_start_ticks")
	run.BootID = r.str("boot_id")
	// Absent from runs an older agent wrote: Finish files those as before.
	run.StartedFrom = r.str("started_from")
	run.RetryableFailure = r.boolean("retryable")
	run.CreatedAt = r.time("created_at")
	run.UpdatedAt = r.time("updated_at")
}

// outbox reads the pending events of a document.
func (r *reader) outbox() []outboxEntry {
	v, ok := r.value(fieldOutbox)
	if !ok {
		return nil
	}
	arr, ok := v.ArrayOK()
	if !ok {
		r.fail(fieldOutbox, "is "+v.Type.String()+", want an array")
		return nil
	}
	vals, err := arr.Values()
	if err != nil {
		r.fail(fieldOutbox, "unreadable array: "+err.Error())
		return nil
	}
	out := make([]outboxEntry, 0, len(vals))
	for i, e := range vals {
		d, ok := e.DocumentOK()
		if !ok {
			r.fail(fieldOutbox, "holds a "+e.Type.String()+", want documents")
			return nil
		}
		er := &reader{raw: d, coll: r.coll, id: r.id, prefix: r.prefix + fieldOutbox + "." + strconv.Itoa(i) + "."}
		ev := readEvent(er)
		if er.err != nil {
			r.err = er.err
			return nil
		}
		if ev.Key == "" {
			r.fail(fieldOutbox, "entry without an id")
			return nil
		}
		out = append(out, ev)
	}
	return out
}

// readEvent reads an outbox entry or an event-log document.
func readEvent(r *reader) outboxEntry {
	ev := outboxEntry{
		Key:    r.str("id"),
		Type:   r.str("type"),
		Card:   r.str("card"),
		Reason: r.str("reason"),
		Actor:  r.str("actor"),
		At:     r.time("at"),
	}
	if d, ok := r.doc("data"); ok {
		ev.Data = eventData{
			From:    d.str("from"),
			To:      d.str("to"),
			Marker:  d.str("marker"),
			Epoch:   d.int("epoch"),
			Labels:  d.strs("labels"),
			Added:   d.strs("added"),
			Removed: d.strs("removed"),
			RunID:   d.str("run_id"),
			Status:  d.str("status"),
			Value:   d.boolean("value"),
		}
		if d.err != nil {
			r.err = d.err
		}
	}
	return ev
}
