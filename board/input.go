package board

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The input rules of the Store verbs. Every store (both twins and whatever
// sits behind the plugin boundary) refuses the same malformed input with the
// same ErrInvalidArgument before it touches storage, so the rules live here
// once. What a store checks against its stored board (a state name, a card
// that must exist) stays in the store: how it reads the board is its own.

// MaxTitleBytes caps a card title.
const MaxTitleBytes = 1024

// MaxGaveUpReasonBytes caps the reason of a give-up stamp: it is written for
// a person to read, so it may be longer than an actor or a failure code.
const MaxGaveUpReasonBytes = 4096

// ValidateCardID checks a card id (see ValidateName).
func ValidateCardID(id string) error { return ValidateName("card id", id) }

// ValidateTitle checks a card title: at most MaxTitleBytes of UTF-8 with no
// control characters. The empty title is allowed.
func ValidateTitle(t string) error {
	switch {
	case len(t) > MaxTitleBytes:
		return Invalid("title is %d bytes, over the %d-byte limit", len(t), MaxTitleBytes)
	case !utf8.ValidString(t):
		return Invalid("title %q is not valid UTF-8", t)
	case strings.IndexFunc(t, unicode.IsControl) >= 0:
		return Invalid("title %q contains a control character", t)
	}
	return nil
}

// ValidateText checks a short free-form value such as an actor, a reason, a
// host or a failure code: at most MaxIDBytes of printable UTF-8. The empty
// value is allowed; kind names the value in the error.
func ValidateText(kind, v string) error {
	if len(v) > MaxIDBytes {
		return Invalid("%s is %d bytes, over the %d-byte limit", kind, len(v), MaxIDBytes)
	}
	if !utf8.ValidString(v) || strings.IndexFunc(v, unicode.IsControl) >= 0 {
		return Invalid("%s %q is not printable UTF-8", kind, v)
	}
	return nil
}

// ValidateLimit refuses a negative listing limit (0 means no limit).
func ValidateLimit(limit int) error {
	if limit < 0 {
		return Invalid("negative limit %d", limit)
	}
	return nil
}

// ValidateLease refuses a lease that is not positive; card, when set, is
// named in the error.
func ValidateLease(card string, lease time.Duration) error {
	if lease > 0 {
		return nil
	}
	if card == "" {
		return Invalid("lease must be positive, got %s", lease)
	}
	return Invalid("card %q: lease must be positive, got %s", card, lease)
}

// inCard prefixes an error with the card it is about, keeping its sentinel.
func inCard(card string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("card %q: %w", card, err)
}

// Normalize validates the input of CreateCard and returns it with its
// labels normalized (NormalizeLabels) and its blockers de-duplicated in
// first-occurrence order. Labels and DependsOn are never nil in the result,
// so a store writes empty lists, not missing ones. A card that names itself
// as a blocker is a dependency cycle: a card that does not exist yet cannot
// be anyone's blocker, so that is the only cycle CreateCard can be asked
// for. The requested State is not checked here: it must name a state of the
// stored board (Board.RequireTarget), which only the store can read.
func (nc CreateCardParams) Normalize() (CreateCardParams, error) {
	if err := ValidateCardID(nc.ID); err != nil {
		return CreateCardParams{}, err
	}
	if err := ValidateTitle(nc.Title); err != nil {
		return CreateCardParams{}, inCard(nc.ID, err)
	}
	if err := ValidateText("actor", nc.Actor); err != nil {
		return CreateCardParams{}, inCard(nc.ID, err)
	}
	labels, err := NormalizeLabels(nc.Labels)
	if err != nil {
		return CreateCardParams{}, inCard(nc.ID, err)
	}
	deps := make([]string, 0, len(nc.DependsOn))
	for _, d := range nc.DependsOn {
		if err := ValidateName("blocker id", d); err != nil {
			return CreateCardParams{}, inCard(nc.ID, err)
		}
		if d == nc.ID {
			return CreateCardParams{}, Invalid("card %q depends on itself: dependency cycle", nc.ID)
		}
		if !slices.Contains(deps, d) {
			deps = append(deps, d)
		}
	}
	if nc.Retry != nil {
		if err := nc.Retry.Validate(); err != nil {
			return CreateCardParams{}, inCard(nc.ID, err)
		}
		if nc.Retry.IsZero() {
			nc.Retry = nil
		}
	}
	out := nc
	out.Labels, out.DependsOn = labels, deps
	return out, nil
}

// Validate checks the card, reason and actor of an operator or automation
// move. The states are the store's to check against its board.
func (m MoveParams) Validate() error {
	if err := ValidateCardID(m.Card); err != nil {
		return err
	}
	if err := ValidateText("reason", string(m.Reason)); err != nil {
		return inCard(m.Card, err)
	}
	return inCard(m.Card, ValidateText("actor", m.Actor))
}

// Validate checks the card and actor of a relative label edit and both of
// its label lists, so bad input is reported as such even on a card whose
// labels it would not change.
func (c AdjustLabelsParams) Validate() error {
	if err := ValidateCardID(c.Card); err != nil {
		return err
	}
	if err := ValidateText("actor", c.Actor); err != nil {
		return inCard(c.Card, err)
	}
	if _, err := NormalizeLabels(c.Add); err != nil {
		return fmt.Errorf("card %q: add: %w", c.Card, err)
	}
	if _, err := NormalizeLabels(c.Remove); err != nil {
		return fmt.Errorf("card %q: remove: %w", c.Card, err)
	}
	return nil
}

// NormalizeSetLabels validates the input of SetLabels and returns the label
// set to write (NormalizeLabels).
func NormalizeSetLabels(card string, labels []string, actor string) ([]string, error) {
	if err := ValidateCardID(card); err != nil {
		return nil, err
	}
	if err := ValidateText("actor", actor); err != nil {
		return nil, inCard(card, err)
	}
	next, err := NormalizeLabels(labels)
	if err != nil {
		return nil, inCard(card, err)
	}
	return next, nil
}

// Normalize validates a label compare-and-set and returns the label set to
// write (NormalizeLabels). Expect is not normalized: it is compared with the
// stored list exactly as the caller read it.
func (l SetLabelsFromParams) Normalize() ([]string, error) {
	if err := ValidateCardID(l.Card); err != nil {
		return nil, err
	}
	if err := ValidateText("actor", l.Actor); err != nil {
		return nil, inCard(l.Card, err)
	}
	if err := ValidateText("reason", string(l.Reason)); err != nil {
		return nil, inCard(l.Card, err)
	}
	next, err := NormalizeLabels(l.Labels)
	if err != nil {
		return nil, inCard(l.Card, err)
	}
	return next, nil
}

// Writes reports whether the compare-and-set writes next over current: only
// while current is still exactly Expect (same labels, same order), and only
// when next differs from it (equal lists write nothing).
func (l SetLabelsFromParams) Writes(current, next []string) bool {
	return slices.Equal(current, l.Expect) && !slices.Equal(current, next)
}

// LabelDiff is the net change from prev to next that a labels event
// records: the labels only next has and those only prev has, each in its
// list's order. An effect layer tells an add (which may arm a one-shot)
// from a remove by it.
func LabelDiff(prev, next []string) (added, removed []string) {
	for _, l := range next {
		if !slices.Contains(prev, l) {
			added = append(added, l)
		}
	}
	for _, l := range prev {
		if !slices.Contains(next, l) {
			removed = append(removed, l)
		}
	}
	return added, removed
}

// ValidateToken checks the card and the claim token of an owner write.
func ValidateToken(card string, tok ClaimToken) error {
	if err := ValidateCardID(card); err != nil {
		return err
	}
	return inCard(card, tok.Validate())
}

// Validate checks a claim request: the card, the marker and the lease.
func (r ClaimParams) Validate() error {
	if err := ValidateCardID(r.Card); err != nil {
		return err
	}
	if err := ValidateMarker(r.Marker); err != nil {
		return inCard(r.Card, err)
	}
	return ValidateLease(r.Card, r.Lease)
}

// Validate checks a claim-next request: the marker and the lease.
func (r ClaimNextParams) Validate() error {
	if err := ValidateMarker(r.Marker); err != nil {
		return err
	}
	if err := ValidateRouteLabels(r.Labels); err != nil {
		return err
	}
	return ValidateLease("", r.Lease)
}

// Validate checks the token and the reason of a fenced move. The states are
// the store's to check against its board.
func (m SetStateOwnedParams) Validate() error {
	if err := ValidateToken(m.Card, m.Token); err != nil {
		return err
	}
	return inCard(m.Card, ValidateText("reason", string(m.Reason)))
}

// ValidateRecovery checks the parts of a reclaim every store checks alike:
// the card, a well-formed recovery marker and a positive lease. How strictly
// Prev and Cutoff are checked is the store's: the fleet twin accepts a Prev
// with no epoch and a zero Cutoff, because a foreign writer can strip the
// epoch and the lease there (DESIGN.md#lost-fence).
func (r ReclaimExpiredParams) ValidateRecovery() error {
	if err := ValidateCardID(r.Card); err != nil {
		return err
	}
	if err := ValidateMarker(r.RecoveryMarker); err != nil {
		return inCard(r.Card, err)
	}
	if !IsRecoveryMarker(r.RecoveryMarker) {
		return Invalid("card %q: %q is not a recovery marker (want %s<host>-<pid>)", r.Card, r.RecoveryMarker, RecoveryPrefix)
	}
	return ValidateLease(r.Card, r.Lease)
}

// Validate refuses a malformed expired-claims query.
func (q ListExpiredClaimCandidatesParams) Validate() error {
	if err := ValidateLimit(q.Limit); err != nil {
		return err
	}
	if q.Cutoff.IsZero() {
		return Invalid("zero cutoff")
	}
	if len(q.After) > MaxCursorBytes {
		return Invalid("listing position of %d bytes (at most %d)", len(q.After), MaxCursorBytes)
	}
	if !utf8.ValidString(q.After) {
		return Invalid("listing position %q is not valid UTF-8", q.After)
	}
	if sh := q.Share; sh != nil {
		if err := ValidateAgentMarker(sh.Reaper); err != nil {
			return Invalid("reaper share: %v", err)
		}
		if sh.Interval <= 0 {
			return Invalid("reaper share of %q: interval %s is not positive", sh.Reaper, sh.Interval)
		}
	}
	return nil
}

// MaxCursorBytes bounds a ListExpiredClaimCandidatesParams.After position.
const MaxCursorBytes = 4096

// Validate refuses a malformed fenced release. Prev.Epoch 0 is allowed: on
// the fleet twin it names a claim whose epoch field a foreign write
// dropped.
func (r ReleaseExpiredParams) Validate() error {
	if err := ValidateCardID(r.Card); err != nil {
		return err
	}
	if err := ValidateMarker(r.Prev.Marker); err != nil || r.Prev.Epoch < 0 {
		return Invalid("card %q: bad previous claim token %+v", r.Card, r.Prev)
	}
	if r.Cutoff.IsZero() {
		return Invalid("card %q: zero cutoff", r.Card)
	}
	return inCard(r.Card, ValidateText("actor", r.Actor))
}

// ValidateGaveUp checks a give-up stamp for card: a reason of at most
// MaxGaveUpReasonBytes of UTF-8, a well-formed run id when one is named and
// no negative attempt count. Its State, when set, is the store's to check
// against its board.
func ValidateGaveUp(card string, g GaveUp) error {
	switch {
	case g.Reason == "":
		return Invalid("card %q: a give-up stamp needs a reason", card)
	case len(g.Reason) > MaxGaveUpReasonBytes:
		return Invalid("card %q: give-up reason is %d bytes, over the %d-byte limit", card, len(g.Reason), MaxGaveUpReasonBytes)
	case !utf8.ValidString(g.Reason):
		return Invalid("card %q: give-up reason %q is not valid UTF-8", card, g.Reason)
	case g.Attempts < 0:
		return Invalid("card %q: negative give-up attempts %d", card, g.Attempts)
	}
	if g.RunID != "" {
		if err := ValidateName("give-up run id", g.RunID); err != nil {
			return inCard(card, err)
		}
	}
	return nil
}

// ValidateCheckpoint checks a run's checkpoint: any text a worker chooses,
// but text, valid UTF-8, since every store and the plugin protocol keep it
// as a string (a JSON or protobuf string cannot carry other bytes: the
// first would silently replace them, the second refuses the whole call).
func ValidateCheckpoint(c string) error {
	if !utf8.ValidString(c) {
		return Invalid("checkpoint %q is not valid UTF-8", c)
	}
	return nil
}

// Known reports whether c is one of the continuations above.
func (c Continuation) Known() bool {
	switch c {
	case ContinuationNone, ContinuationRedeliveryPending, ContinuationRetryArmed:
		return true
	}
	return false
}

// Normalize validates the input of CreateRun and returns it with its
// defaults filled in: an empty Status is running, an empty Continuation is
// none. An empty Owner is left empty: the store fills it with the card's
// current claim (a run's owner is the claim holder), which only it can read.
func (r Run) Normalize() (Run, error) {
	if err := ValidateName("run id", r.ID); err != nil {
		return Run{}, err
	}
	if err := ValidateCardID(r.Card); err != nil {
		return Run{}, fmt.Errorf("run %q: %w", r.ID, err)
	}
	if r.Status == "" {
		r.Status = RunRunning
	}
	if !r.Status.Known() {
		return Run{}, Invalid("run %q of card %q: unknown status %q", r.ID, r.Card, r.Status)
	}
	if r.Continuation == "" {
		r.Continuation = ContinuationNone
	}
	if !r.Continuation.Known() {
		return Run{}, Invalid("run %q of card %q: unknown continuation %q", r.ID, r.Card, r.Continuation)
	}
	if r.Owner != "" {
		if err := ValidateMarker(r.Owner); err != nil {
			return Run{}, fmt.Errorf("run %q of card %q: owner: %w", r.ID, r.Card, err)
		}
	}
	for _, f := range []struct{ kind, v string }{{"failure code", r.FailureCode}, {"host", r.Host}} {
		if err := ValidateText(f.kind, f.v); err != nil {
			return Run{}, fmt.Errorf("run %q of card %q: %w", r.ID, r.Card, err)
		}
	}
	if err := ValidateCheckpoint(r.Checkpoint); err != nil {
		return Run{}, fmt.Errorf("run %q of card %q: %w", r.ID, r.Card, err)
	}
	if r.PID < 0 || r.Epoch < 0 {
		return Run{}, Invalid("run %q of card %q: negative pid or epoch", r.ID, r.Card)
	}
	return r, nil
}

// Validate checks a run update: the run id, its token, every status and
// continuation it names, its failure code, its checkpoint and its actor.
func (u UpdateRunParams) Validate() error {
	if err := u.ValidateChange(); err != nil {
		return err
	}
	if err := u.Token.Validate(); err != nil {
		return fmt.Errorf("run %q: %w", u.ID, err)
	}
	return nil
}

// ValidateChange checks everything of a run update but its token: what a
// caller can check before it knows the claim the write is made under.
func (u UpdateRunParams) ValidateChange() error {
	if err := ValidateName("run id", u.ID); err != nil {
		return err
	}
	if u.IfStatus != nil && !u.IfStatus.Known() {
		return Invalid("run %q: unknown if-status %q", u.ID, *u.IfStatus)
	}
	if u.Status != nil && !u.Status.Known() {
		return Invalid("run %q: unknown status %q", u.ID, *u.Status)
	}
	if u.Continuation != nil && !u.Continuation.Known() {
		return Invalid("run %q: unknown continuation %q", u.ID, *u.Continuation)
	}
	if u.FailureCode != nil {
		if err := ValidateText("failure code", *u.FailureCode); err != nil {
			return fmt.Errorf("run %q: %w", u.ID, err)
		}
	}
	if u.Checkpoint != nil {
		if err := ValidateCheckpoint(*u.Checkpoint); err != nil {
			return fmt.Errorf("run %q: %w", u.ID, err)
		}
	}
	if err := ValidateText("actor", u.Actor); err != nil {
		return fmt.Errorf("run %q: %w", u.ID, err)
	}
	return nil
}

// ApplyTo computes the run the update makes of cur. With IfStatus it is a
// compare-and-set on the current status, so a late verdict from a living
// owner and the liveness oracle's PROCESS_ORPHANED promotion cannot
// overwrite each other: a miss is ErrTransitionRejected. changed is false
// when next equals cur, which a store writes nothing for. UpdatedAt is left
// as it was: the store stamps it with its own clock.
func (u UpdateRunParams) ApplyTo(cur Run) (next Run, changed bool, err error) {
	if u.IfStatus != nil && cur.Status != *u.IfStatus {
		return cur, false, fmt.Errorf("run %q of card %q: status is %s, not %s: %w",
			u.ID, cur.Card, cur.Status, *u.IfStatus, ErrTransitionRejected)
	}
	next = cur
	if u.Status != nil {
		next.Status = *u.Status
	}
	if u.Continuation != nil {
		next.Continuation = *u.Continuation
	}
	if u.FailureCode != nil {
		next.FailureCode = *u.FailureCode
	}
	if u.Checkpoint != nil {
		next.Checkpoint = *u.Checkpoint
	}
	return next, next != cur, nil
}
