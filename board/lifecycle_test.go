package board

import (
	"errors"
	"strings"
	"testing"
)

func TestClaimBlocked(t *testing.T) {
	t.Parallel()
	b := DefaultBoard(true)
	cards := map[string]Card{
		"open":   {ID: "open", State: StateReady},
		"done":   {ID: "done", State: StateDone},
		"failed": {ID: "failed", State: StateFailed},
	}
	read := func(id string) (Card, error) {
		if c, ok := cards[id]; ok {
			return c, nil
		}
		return Card{}, NotFound("card", id)
	}
	tests := []struct {
		name     string
		c        Card
		want     []string // substrings of the refusal; nil: no refusal
		wantNone []string // what the refusal must not name
	}{
		{"in the pool with an open blocker: an operator let it go", Card{ID: "d", State: StateReady, DependsOn: []string{"open"}}, nil, nil},
		{"outside the pool, no blockers", Card{ID: "d", State: StateBacklog}, nil, nil},
		{"in awaiting_input", Card{ID: "d", State: StateAwaitingInput, DependsOn: []string{"open"}}, nil, nil},
		{"waiting on one blocker", Card{ID: "d", State: StateWaitingDeps, DependsOn: []string{"done", "open"}},
			[]string{`card "d"`, `blocker "open" (in ready)`}, []string{`"done"`}},
		{"waiting on a failed and a missing blocker", Card{ID: "d", State: StateWaitingDeps, DependsOn: []string{"failed", "gone"}},
			[]string{`blockers "failed" (in failed), "gone" (missing)`}, nil},
		{"parked in waiting_deps with every blocker complete", Card{ID: "d", State: StateWaitingDeps, DependsOn: []string{"done"}},
			[]string{"no blocker is outstanding", "move it to a pool state"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := b.ClaimBlocked(tc.c, read)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("ClaimBlocked = %v, want no refusal", err)
				}
				return
			}
			if !errors.Is(err, ErrWaitingOnBlockers) || !errors.Is(err, ErrTransitionRejected) {
				t.Fatalf("ClaimBlocked = %v, want ErrWaitingOnBlockers wrapping ErrTransitionRejected", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not say %q", err, w)
				}
			}
			for _, w := range tc.wantNone {
				if strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q names %s, which is complete", err, w)
				}
			}
		})
	}
	t.Run("a read error is returned as is", func(t *testing.T) {
		t.Parallel()
		boom := errors.New("store unreachable")
		err := b.ClaimBlocked(Card{ID: "d", State: StateWaitingDeps, DependsOn: []string{"x"}}, func(string) (Card, error) { return Card{}, boom })
		if !errors.Is(err, boom) || errors.Is(err, ErrWaitingOnBlockers) {
			t.Errorf("ClaimBlocked = %v, want the read error itself", err)
		}
	})
}
