package board

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestValidateTitle(t *testing.T) {
	tests := []struct {
		name  string
		title string
		ok    bool
	}{
		{"empty", "", true},
		{"plain", "fix the build", true},
		{"at the limit", strings.Repeat("x", MaxTitleBytes), true},
		{"over the limit", strings.Repeat("x", MaxTitleBytes+1), false},
		{"invalid utf-8", "a\xffb", false},
		{"newline", "two\nlines", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateTitle(tc.title)
			if got, want := err == nil, tc.ok; got != want {
				t.Fatalf("ValidateTitle(%q) = %v, want ok=%v", tc.title, err, want)
			}
			if err != nil && !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("error %v does not wrap ErrInvalidArgument", err)
			}
		})
	}
}

// TestValidateName: every name a store is asked about, reads included,
// passes here first, so a name a store plugin could not even be sent (not
// UTF-8) or a store could not key (NUL, control characters) is refused as
// the caller's mistake.
func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		v    string
		ok   bool
	}{
		{"plain", "build-42", true},
		{"non-ascii", "café", true},
		{"at the limit", strings.Repeat("x", MaxIDBytes), true},
		{"empty", "", false},
		{"over the limit", strings.Repeat("x", MaxIDBytes+1), false},
		{"stray byte", "\xff", false},
		{"truncated sequence", "caf\xc3", false},
		{"overlong slash", "\xc0\xaf", false},
		{"encoded surrogate", "\xed\xa0\x80", false},
		{"past U+10FFFF", "\xf4\x90\x80\x80", false},
		{"NUL", "a\x00b", false},
		{"escape", "\x1b[2J", false},
		{"DEL", "a\x7f", false},
		{"C1 control", "a\u0085b", false},
		{"leading space", " a", false},
		{"trailing newline", "a\n", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateName("card id", tc.v)
			if got, want := err == nil, tc.ok; got != want {
				t.Fatalf("ValidateName(%q) = %v, want ok=%v", tc.v, err, want)
			}
			if err != nil && (!errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "card id")) {
				t.Errorf("error %v does not wrap ErrInvalidArgument or name the kind", err)
			}
		})
	}
}

func TestValidateText(t *testing.T) {
	tests := []struct {
		name string
		v    string
		ok   bool
	}{
		{"empty", "", true},
		{"actor", "uid:1000", true},
		{"at the limit", strings.Repeat("a", MaxIDBytes), true},
		{"over the limit", strings.Repeat("a", MaxIDBytes+1), false},
		{"control character", "a\x00b", false},
		{"invalid utf-8", "\xc3", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateText("actor", tc.v)
			if got, want := err == nil, tc.ok; got != want {
				t.Fatalf("ValidateText(%q) = %v, want ok=%v", tc.v, err, want)
			}
			if err != nil && (!errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "actor")) {
				t.Errorf("error %v does not wrap ErrInvalidArgument or name the kind", err)
			}
		})
	}
}

func TestValidateLease(t *testing.T) {
	tests := []struct {
		name  string
		card  string
		lease time.Duration
		ok    bool
		say   string
	}{
		{"positive", "c1", time.Second, true, ""},
		{"zero names the card", "c1", 0, false, `card "c1"`},
		{"negative without a card", "", -time.Second, false, "lease must be positive, got -1s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateLease(tc.card, tc.lease)
			if got, want := err == nil, tc.ok; got != want {
				t.Fatalf("ValidateLease = %v, want ok=%v", err, want)
			}
			if err != nil && !strings.Contains(err.Error(), tc.say) {
				t.Errorf("error %q does not say %q", err, tc.say)
			}
		})
	}
}

func TestNewCardNormalize(t *testing.T) {
	t.Run("labels normalized and blockers de-duplicated", func(t *testing.T) {
		got, err := CreateCardParams{ID: "c", Labels: []string{" a ", "b", "a", ""}, DependsOn: []string{"x", "y", "x"}}.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"a", "b"}; !slices.Equal(got.Labels, want) {
			t.Errorf("labels = %q, want %q", got.Labels, want)
		}
		if want := []string{"x", "y"}; !slices.Equal(got.DependsOn, want) {
			t.Errorf("depends_on = %q, want %q", got.DependsOn, want)
		}
	})
	t.Run("empty lists are not nil", func(t *testing.T) {
		got, err := CreateCardParams{ID: "c"}.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		if got.Labels == nil || got.DependsOn == nil {
			t.Errorf("labels %#v, depends_on %#v: want empty, non-nil lists", got.Labels, got.DependsOn)
		}
	})
	refused := []struct {
		name string
		nc   CreateCardParams
		say  string
	}{
		{"empty id", CreateCardParams{}, "empty card id"},
		{"bad title", CreateCardParams{ID: "c", Title: "a\nb"}, "title"},
		{"bad actor", CreateCardParams{ID: "c", Actor: "\x01"}, "actor"},
		{"bad label", CreateCardParams{ID: "c", Labels: []string{"a\x00"}}, "label"},
		{"bad blocker id", CreateCardParams{ID: "c", DependsOn: []string{" x"}}, "blocker id"},
		{"self dependency", CreateCardParams{ID: "c", DependsOn: []string{"c"}}, "dependency cycle"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.nc.Normalize()
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("Normalize(%+v) = %v, want an invalid argument saying %q", tc.nc, err, tc.say)
			}
		})
	}
}

func TestInputValidators(t *testing.T) {
	good := ClaimToken{Marker: "host-42", Epoch: 3}
	tests := []struct {
		name string
		err  error
		ok   bool
	}{
		{"move ok", MoveParams{Card: "c", Reason: ReasonUnblocked, Actor: "cli"}.Validate(), true},
		{"move bad reason", MoveParams{Card: "c", Reason: "a\nb"}.Validate(), false},
		{"move bad actor", MoveParams{Card: "c", Actor: "a\x00"}.Validate(), false},
		{"label change ok", AdjustLabelsParams{Card: "c", Add: []string{"a"}, Remove: []string{"b"}}.Validate(), true},
		{"label change bad add", AdjustLabelsParams{Card: "c", Add: []string{"a\x00"}}.Validate(), false},
		{"label change bad remove", AdjustLabelsParams{Card: "c", Remove: []string{"a\x00"}}.Validate(), false},
		{"claim ok", ClaimParams{Card: "c", Marker: "host-42", Lease: time.Second}.Validate(), true},
		{"claim bad marker", ClaimParams{Card: "c", Marker: "host", Lease: time.Second}.Validate(), false},
		{"claim no lease", ClaimParams{Card: "c", Marker: "host-42"}.Validate(), false},
		{"claim next ok", ClaimNextParams{Marker: "host-42", Lease: time.Second}.Validate(), true},
		{"claim next no lease", ClaimNextParams{Marker: "host-42"}.Validate(), false},
		{"token ok", ValidateToken("c", good), true},
		{"token zero", ValidateToken("c", ClaimToken{}), false},
		{"token bad card", ValidateToken("", good), false},
		{"owned move ok", SetStateOwnedParams{Card: "c", Token: good, To: "done"}.Validate(), true},
		{"owned move bad reason", SetStateOwnedParams{Card: "c", Token: good, Reason: "\x07"}.Validate(), false},
		{"reclaim ok", ReclaimExpiredParams{Card: "c", RecoveryMarker: "reaper:host-42", Lease: time.Second}.ValidateRecovery(), true},
		{"reclaim worker marker", ReclaimExpiredParams{Card: "c", RecoveryMarker: "host-42", Lease: time.Second}.ValidateRecovery(), false},
		{"reclaim no lease", ReclaimExpiredParams{Card: "c", RecoveryMarker: "reaper:host-42"}.ValidateRecovery(), false},
		{"gave up ok", ValidateGaveUp("c", GaveUp{Reason: "stuck"}), true},
		{"gave up no reason", ValidateGaveUp("c", GaveUp{}), false},
		{"gave up long reason", ValidateGaveUp("c", GaveUp{Reason: strings.Repeat("r", MaxGaveUpReasonBytes+1)}), false},
		{"gave up negative attempts", ValidateGaveUp("c", GaveUp{Reason: "stuck", Attempts: -1}), false},
		{"gave up reason not utf-8", ValidateGaveUp("c", GaveUp{Reason: "st\xffuck"}), false},
		{"gave up multi-line reason", ValidateGaveUp("c", GaveUp{Reason: "line one\nline two"}), true},
		{"gave up run id", ValidateGaveUp("c", GaveUp{Reason: "stuck", RunID: "r1"}), true},
		{"gave up bad run id", ValidateGaveUp("c", GaveUp{Reason: "stuck", RunID: "r\x00"}), false},
		{"expired query ok", ListExpiredClaimCandidatesParams{Cutoff: time.Unix(1, 0), After: "c1"}.Validate(), true},
		{"expired query position not utf-8", ListExpiredClaimCandidatesParams{Cutoff: time.Unix(1, 0), After: "c\xff"}.Validate(), false},
		{"limit zero", ValidateLimit(0), true},
		{"limit negative", ValidateLimit(-1), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := tc.err == nil, tc.ok; got != want {
				t.Fatalf("err = %v, want ok=%v", tc.err, want)
			}
			if tc.err != nil && !errors.Is(tc.err, ErrInvalidArgument) {
				t.Errorf("error %v does not wrap ErrInvalidArgument", tc.err)
			}
		})
	}
}

func TestLabelsFrom(t *testing.T) {
	l := SetLabelsFromParams{Card: "c", Expect: []string{"a", "b"}, Labels: []string{" b ", "c", "b"}}
	next, err := l.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"b", "c"}; !slices.Equal(next, want) {
		t.Fatalf("Normalize = %q, want %q", next, want)
	}
	tests := []struct {
		name    string
		current []string
		want    bool
	}{
		{"still as expected", []string{"a", "b"}, true},
		{"changed since", []string{"a"}, false},
		{"same labels in another order", []string{"b", "a"}, false},
		{"already the new labels", []string{"b", "c"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := l.Writes(tc.current, next); got != tc.want {
				t.Errorf("Writes(%q) = %v, want %v", tc.current, got, tc.want)
			}
		})
	}
	if _, err := (SetLabelsFromParams{Card: "c", Reason: "x\ny"}).Normalize(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a bad reason: %v, want ErrInvalidArgument", err)
	}
}

func TestLabelDiff(t *testing.T) {
	added, removed := LabelDiff([]string{"a", "b", "c"}, []string{"c", "d", "a", "e"})
	if want := []string{"d", "e"}; !slices.Equal(added, want) {
		t.Errorf("added = %q, want %q", added, want)
	}
	if want := []string{"b"}; !slices.Equal(removed, want) {
		t.Errorf("removed = %q, want %q", removed, want)
	}
	if a, r := LabelDiff([]string{"a"}, []string{"a"}); a != nil || r != nil {
		t.Errorf("no change: added %q, removed %q, want none", a, r)
	}
}

func TestRunNormalize(t *testing.T) {
	got, err := Run{ID: "r1", Card: "c"}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != RunRunning || got.Continuation != ContinuationNone {
		t.Errorf("defaults: status %q, continuation %q, want %q, %q", got.Status, got.Continuation, RunRunning, ContinuationNone)
	}
	refused := []struct {
		name string
		r    Run
	}{
		{"empty id", Run{Card: "c"}},
		{"bad card", Run{ID: "r1"}},
		{"unknown status", Run{ID: "r1", Card: "c", Status: "sleeping"}},
		{"unknown continuation", Run{ID: "r1", Card: "c", Continuation: "later"}},
		{"bad owner", Run{ID: "r1", Card: "c", Owner: "nobody"}},
		{"bad host", Run{ID: "r1", Card: "c", Host: "a\nb"}},
		{"checkpoint not utf-8", Run{ID: "r1", Card: "c", Checkpoint: "step \xc0"}},
		{"run id not utf-8", Run{ID: "r\xff", Card: "c"}},
		{"negative pid", Run{ID: "r1", Card: "c", PID: -1}},
		{"negative epoch", Run{ID: "r1", Card: "c", Epoch: -1}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.r.Normalize(); !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("Normalize(%+v) = %v, want ErrInvalidArgument", tc.r, err)
			}
		})
	}
}

func TestRunUpdate(t *testing.T) {
	ptr := func(s RunStatus) *RunStatus { return &s }
	cont := func(c Continuation) *Continuation { return &c }
	str := func(s string) *string { return &s }
	cur := Run{ID: "r1", Card: "c", Status: RunRunning, Continuation: ContinuationNone}
	tok := ClaimToken{Marker: "host-100", Epoch: 1}

	t.Run("validate", func(t *testing.T) {
		for name, u := range map[string]UpdateRunParams{
			"unknown if-status":    {ID: "r1", Token: tok, IfStatus: ptr("x")},
			"unknown status":       {ID: "r1", Token: tok, Status: ptr("x")},
			"unknown continuation": {ID: "r1", Token: tok, Continuation: cont("x")},
			"bad failure code":     {ID: "r1", Token: tok, FailureCode: str("a\x00")},
			"bad actor":            {ID: "r1", Token: tok, Actor: "a\nb"},
			"checkpoint not utf-8": {ID: "r1", Token: tok, Checkpoint: str("\xff")},
			"no token":             {ID: "r1", Status: ptr(RunFinished)},
			"empty id":             {Token: tok},
		} {
			if err := u.Validate(); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("%s: Validate = %v, want ErrInvalidArgument", name, err)
			}
		}
		if err := (UpdateRunParams{ID: "r1", Token: tok, Status: ptr(RunFinished)}).Validate(); err != nil {
			t.Errorf("a good update: %v", err)
		}
	})
	tests := []struct {
		name    string
		u       UpdateRunParams
		want    Run
		changed bool
		err     error
	}{
		{"status and code", UpdateRunParams{Status: ptr(RunFailed), FailureCode: str("E1")},
			Run{ID: "r1", Card: "c", Status: RunFailed, Continuation: ContinuationNone, FailureCode: "E1"}, true, nil},
		{"continuation and checkpoint", UpdateRunParams{Continuation: cont(ContinuationRetryArmed), Checkpoint: str("k")},
			Run{ID: "r1", Card: "c", Status: RunRunning, Continuation: ContinuationRetryArmed, Checkpoint: "k"}, true, nil},
		{"same values change nothing", UpdateRunParams{Status: ptr(RunRunning)}, cur, false, nil},
		{"if-status holds", UpdateRunParams{IfStatus: ptr(RunRunning), Status: ptr(RunFinished)},
			Run{ID: "r1", Card: "c", Status: RunFinished, Continuation: ContinuationNone}, true, nil},
		{"if-status missed", UpdateRunParams{IfStatus: ptr(RunQueued), Status: ptr(RunFinished)}, cur, false, ErrTransitionRejected},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, changed, err := tc.u.ApplyTo(cur)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if got != tc.want || changed != tc.changed {
				t.Errorf("ApplyTo = %+v, %v; want %+v, %v", got, changed, tc.want, tc.changed)
			}
		})
	}
}
