package board

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestInitialState(t *testing.T) {
	def := DefaultBoard(false)
	noWaiting := Board{States: []State{
		{Name: "todo", Pool: true},
		{Name: "doing", Running: true},
		{Name: "done", Terminal: true, Completion: true},
	}}
	tests := []struct {
		name      string
		b         Board
		requested string
		complete  bool
		want      string
	}{
		{"requested wins", def, StateBacklog, false, StateBacklog},
		{"blockers complete: first pool", def, "", true, StateReady},
		{"blocker incomplete: waiting", def, "", false, StateWaitingDeps},
		{"no waiting state: first pool", noWaiting, "", false, "todo"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.InitialState(tc.requested, tc.complete); got != tc.want {
				t.Errorf("InitialState(%q, %v) = %q, want %q", tc.requested, tc.complete, got, tc.want)
			}
		})
	}
}

func TestDecideMove(t *testing.T) {
	b := DefaultBoard(true)
	tests := []struct {
		name           string
		cur, from, to  string
		move           bool
		terminalExitOK bool // err is ErrTerminalStateExit
	}{
		{"plain move", StateReady, "", StateInProgress, true, false},
		{"already there", StateReady, "", StateReady, false, false},
		{"terminal to terminal refiles", StateDone, "", StateFailed, true, false},
		{"leaving a sink", StateDone, "", StateReady, false, true},
		{"declared source holds", StateReady, StateReady, StateInProgress, true, false},
		{"declared source drifted", StateBacklog, StateReady, StateInProgress, false, false},
		{"terminal source refused even drifted", StateReady, StateDone, StateReady, false, true},
		{"declared source already at target", StateReady, StateReady, StateReady, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			move, err := b.DecideMove("c", tc.cur, tc.from, tc.to)
			if got, want := errors.Is(err, ErrTerminalStateExit), tc.terminalExitOK; got != want || (err != nil && !want) {
				t.Fatalf("err = %v, want terminal exit %v", err, want)
			}
			if err != nil && !errors.Is(err, ErrTransitionRejected) {
				t.Errorf("a terminal exit must still match ErrTransitionRejected: %v", err)
			}
			if move != tc.move {
				t.Errorf("move = %v, want %v", move, tc.move)
			}
		})
	}
}

func TestReopenRules(t *testing.T) {
	b := DefaultBoard(true)
	done, _ := b.State(StateDone)
	ready, _ := b.State(StateReady)
	if err := ReopenInto("c", done); !errors.Is(err, ErrTransitionRejected) {
		t.Errorf("reopen into done: %v, want ErrTransitionRejected", err)
	}
	if err := ReopenInto("c", ready); err != nil {
		t.Errorf("reopen into ready: %v", err)
	}

	checks := []struct {
		name      string
		cur, from string
		ok        bool
	}{
		{"terminal card", StateDone, "", true},
		{"declared source holds", StateDone, StateDone, true},
		{"declared source drifted", StateFailed, StateDone, false},
		{"working card", StateReady, "", false},
	}
	for _, tc := range checks {
		t.Run(tc.name, func(t *testing.T) {
			err := b.CheckReopen("c", tc.cur, tc.from)
			if got, want := err == nil, tc.ok; got != want {
				t.Fatalf("CheckReopen = %v, want ok=%v", err, want)
			}
			if err != nil && !errors.Is(err, ErrTransitionRejected) {
				t.Errorf("error %v does not wrap ErrTransitionRejected", err)
			}
		})
	}

	blocked := []struct {
		name  string
		d     Card
		block bool
	}{
		{"promoted by it and working", Card{ID: "d", State: StateReady, DependsOn: []string{"c"}, PromotedBy: "c"}, true},
		{"promoted by it and finished", Card{ID: "d", State: StateDone, DependsOn: []string{"c"}, PromotedBy: "c"}, true},
		{"promoted by another blocker", Card{ID: "d", State: StateReady, DependsOn: []string{"c", "x"}, PromotedBy: "x"}, true},
		{"moved on by hand", Card{ID: "d", State: StateBacklog, DependsOn: []string{"c"}}, true},
		{"failed", Card{ID: "d", State: StateFailed, DependsOn: []string{"c"}}, true},
		{"promoted and parked back in waiting_deps", Card{ID: "d", State: StateWaitingDeps, DependsOn: []string{"c"}, PromotedBy: "c"}, false},
		{"never promoted", Card{ID: "d", State: StateWaitingDeps, DependsOn: []string{"c"}}, false},
		{"not a dependent of it", Card{ID: "d", State: StateReady, DependsOn: []string{"x"}, PromotedBy: "x"}, false},
	}
	for _, tc := range blocked {
		t.Run(tc.name, func(t *testing.T) {
			err := b.ReopenBlockedBy("c", tc.d)
			if got, want := err != nil, tc.block; got != want {
				t.Fatalf("ReopenBlockedBy = %v, want blocked=%v", err, want)
			}
			if err == nil {
				return
			}
			if !errors.Is(err, ErrTransitionRejected) {
				t.Errorf("error %v does not wrap ErrTransitionRejected", err)
			}
			// The refusal names the dependent and the way out.
			for _, want := range []string{`dependent "d"`, tc.d.State, "move it back to waiting_deps first"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}

	// A board without waiting_deps has nowhere to park a dependent, and the
	// refusal says so rather than sending the operator looking for it.
	noWait := Board{States: slices.DeleteFunc(slices.Clone(b.States), func(s State) bool { return s.Name == StateWaitingDeps })}
	err := noWait.ReopenBlockedBy("c", Card{ID: "d", State: StateReady, DependsOn: []string{"c"}})
	if !errors.Is(err, ErrTransitionRejected) || !strings.Contains(err.Error(), "no waiting_deps state") {
		t.Errorf("ReopenBlockedBy on a board without waiting_deps = %v, want ErrTransitionRejected saying the board has no waiting_deps state", err)
	}
}

func TestPromotion(t *testing.T) {
	b := DefaultBoard(true)
	tests := []struct {
		name   string
		to     string
		reason Reason
		want   bool
	}{
		{"completion by a person", StateDone, ReasonNone, true},
		{"completion by a run verdict", StateDone, ReasonRunFinished, true},
		{"completion under a state rename", StateDone, ReasonStateRename, false},
		{"completion by the watchdog", StateDone, ReasonWatchdog, false},
		{"not a completion state", StateFailed, ReasonNone, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := b.Promotes(tc.to, tc.reason); got != tc.want {
				t.Errorf("Promotes(%q, %q) = %v, want %v", tc.to, tc.reason, got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name   string
		states []string
		want   bool
	}{
		{"no blockers", nil, true},
		{"all done", []string{StateDone, StateDone}, true},
		{"one failed", []string{StateDone, StateFailed}, false},
		{"one working", []string{StateReady}, false},
	} {
		t.Run("complete "+tc.name, func(t *testing.T) {
			if got := b.Complete(tc.states); got != tc.want {
				t.Errorf("Complete(%q) = %v, want %v", tc.states, got, tc.want)
			}
		})
	}
}

func TestStampedReason(t *testing.T) {
	tests := []struct {
		name   string
		marker string
		reason Reason
		want   Reason
	}{
		{"worker keeps its reason", "host-42", ReasonNone, ReasonNone},
		{"worker keeps a verdict", "host-42", ReasonRunFailed, ReasonRunFailed},
		{"recovery move is the watchdog's", "reaper:host-7", ReasonNone, ReasonWatchdog},
		{"recovery cannot pass a person's reason", "reaper:host-7", ReasonUnblocked, ReasonWatchdog},
		{"recovery keeps run_finished", "reaper:host-7", ReasonRunFinished, ReasonRunFinished},
		{"recovery keeps run_failed", "reaper:host-7", ReasonRunFailed, ReasonRunFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := SetStateOwnedParams{Card: "c", Token: ClaimToken{Marker: tc.marker, Epoch: 1}, Reason: tc.reason}
			if got := m.StampedReason(); got != tc.want {
				t.Errorf("StampedReason() = %q, want %q", got, tc.want)
			}
		})
	}
}
