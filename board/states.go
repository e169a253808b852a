package board

import (
	"fmt"
	"slices"
)

// State is one column of the board and its flags.
type State struct {
	Name string `json:"name" yaml:"name"`
	// Pool: eligible for ClaimNext.
	Pool bool `json:"pool,omitempty" yaml:"pool,omitempty"`
	// Launch: entering this state is a launch request (a launch hint fires).
	Launch bool `json:"launch,omitempty" yaml:"launch,omitempty"`
	// Running: the running column, where a card sits while its run executes.
	Running bool `json:"running,omitempty" yaml:"running,omitempty"`
	// Terminal: a sink. Only Reopen leaves it (DESIGN.md#sinks).
	Terminal bool `json:"terminal,omitempty" yaml:"terminal,omitempty"`
	// Completion: reaching it completes the card and promotes dependents.
	Completion bool `json:"completion,omitempty" yaml:"completion,omitempty"`
	// RetiringInto is set only while a state sweep renames or deletes this
	// state: it names the state its cards are being moved into. A retiring
	// state keeps its flags for the cards still in it, but no card may
	// enter it (RequireTarget) and it counts for none of the board's
	// roles (first pool, running column, completion). It is never
	// configured by hand.
	RetiringInto string `json:"retiring_into,omitempty" yaml:"retiring_into,omitempty"`
}

// Well-known state names of the default board. Code that needs "the failed
// column" or "the waiting column" uses these names; a custom board that
// drops them loses the behaviour tied to them (documented in the README).
const (
	StateBacklog       = "backlog"
	StateReady         = "ready"
	StateInProgress    = "in_progress"
	StateAwaitingInput = "awaiting_input"
	StateWaitingDeps   = "waiting_deps"
	StateDone          = "done"
	StateFailed        = "failed"
	StateBlocked       = "blocked"
	StateCancelled     = "cancelled"
)

// Board is the ordered set of states. Order matters: "the first pool state"
// is where an unblocked dependent or a reparked card goes.
type Board struct {
	States []State `json:"states" yaml:"states"`
	// Retry is the board's default retry policy (DESIGN.md#retries); zero
	// fields take the defaults (DefaultRetryPolicy).
	Retry RetryPolicy `json:"retry,omitzero" yaml:"-"`
}

// DefaultBoard is the board a new store is seeded with when the
// configuration names none. local selects the
// embedded (bbolt) variant, where in_progress is also a pool state because a
// re-claim there resumes the recorded run (DESIGN.md#twin-repark); on the fleet twin a
// card returns to the pool through a repark into ready instead.
func DefaultBoard(local bool) Board {
	return Board{States: []State{
		{Name: StateBacklog},
		{Name: StateReady, Pool: true, Launch: true},
		{Name: StateInProgress, Running: true, Pool: local},
		{Name: StateAwaitingInput},
		{Name: StateWaitingDeps},
		{Name: StateDone, Terminal: true, Completion: true},
		{Name: StateFailed, Terminal: true},
		{Name: StateBlocked, Terminal: true},
		{Name: StateCancelled, Terminal: true},
	}}
}

// Validate checks names are unique and well formed, and that the board has
// at least one pool state, exactly one running state and a completion state
// that is terminal.
func (b Board) Validate() error {
	if len(b.States) == 0 {
		return Invalid("board has no states")
	}
	seen := map[string]bool{}
	var pool, running, completion int
	for _, s := range b.States {
		if err := ValidateName("state", s.Name); err != nil {
			return err
		}
		if seen[s.Name] {
			return Invalid("state %q is listed twice", s.Name)
		}
		seen[s.Name] = true
		if s.Retiring() {
			// A retiring state's cards are on their way to its successor,
			// which holds its roles meanwhile (see State.RetiringInto).
			continue
		}
		if s.Pool && !s.Running {
			pool++
		}
		if s.Running {
			running++
		}
		if s.Completion {
			completion++
			if !s.Terminal {
				return Invalid("completion state %q must also be terminal", s.Name)
			}
		}
		if s.Terminal && (s.Pool || s.Running || s.Launch) {
			return Invalid("terminal state %q cannot be pool, running or launch", s.Name)
		}
	}
	for _, s := range b.States {
		if !s.Retiring() {
			continue
		}
		if into, ok := b.State(s.RetiringInto); !ok || into.Retiring() {
			return Invalid("state %q is retiring into %q, which is not a live state of the board", s.Name, s.RetiringInto)
		}
	}
	if err := b.Retry.Validate(); err != nil {
		return err
	}
	switch {
	case pool == 0:
		return Invalid("board needs at least one pool state outside the running column")
	case running != 1:
		return Invalid("board needs exactly one running state, has %d", running)
	case completion == 0:
		return Invalid("board needs a completion state")
	}
	return nil
}

// State returns the named state.
func (b Board) State(name string) (State, bool) {
	i := slices.IndexFunc(b.States, func(s State) bool { return s.Name == name })
	if i < 0 {
		return State{}, false
	}
	return b.States[i], true
}

// Has reports whether the board has a state of that name.
func (b Board) Has(name string) bool { _, ok := b.State(name); return ok }

// Require returns the named state or an ErrInvalidArgument naming it.
func (b Board) Require(name string) (State, error) {
	s, ok := b.State(name)
	if !ok {
		return State{}, Invalid("unknown state %q", name)
	}
	return s, nil
}

// IsTerminal reports whether name is a terminal state of this board.
func (b Board) IsTerminal(name string) bool { s, ok := b.State(name); return ok && s.Terminal }

// IsPool reports whether name is a pool state.
func (b Board) IsPool(name string) bool { s, ok := b.State(name); return ok && s.Pool }

// IsRunning reports whether name is the running column.
func (b Board) IsRunning(name string) bool { s, ok := b.State(name); return ok && s.Running }

// IsLaunch reports whether entering name is a launch request.
func (b Board) IsLaunch(name string) bool { s, ok := b.State(name); return ok && s.Launch }

// IsCompletion reports whether name is a completion state.
func (b Board) IsCompletion(name string) bool { s, ok := b.State(name); return ok && s.Completion }

// FirstPool is the first pool state in board order.
func (b Board) FirstPool() string { return b.first(func(s State) bool { return s.Pool && !s.Running }) }

// The role lookups (FirstPool, Running, Completion) skip retiring states:
// their successor holds the role while a sweep moves the cards.

// Running is the running column.
func (b Board) Running() string { return b.first(func(s State) bool { return s.Running }) }

// Completion is the first completion state.
func (b Board) Completion() string { return b.first(func(s State) bool { return s.Completion }) }

// PoolStates lists the pool states in board order.
func (b Board) PoolStates() []string {
	var out []string
	for _, s := range b.States {
		if s.Pool {
			out = append(out, s.Name)
		}
	}
	return out
}

func (b Board) first(pred func(State) bool) string {
	for _, s := range b.States {
		if pred(s) && !s.Retiring() {
			return s.Name
		}
	}
	return ""
}

// String renders the board compactly for logs.
func (b Board) String() string {
	out := ""
	for i, s := range b.States {
		if i > 0 {
			out += " "
		}
		out += s.Name
		var flags []string
		for _, f := range []struct {
			on   bool
			name string
		}{{s.Pool, "pool"}, {s.Launch, "launch"}, {s.Running, "running"}, {s.Terminal, "terminal"}, {s.Completion, "completion"}} {
			if f.on {
				flags = append(flags, f.name)
			}
		}
		if s.Retiring() {
			flags = append(flags, "retiring→"+s.RetiringInto)
		}
		if len(flags) > 0 {
			out += fmt.Sprint(flags)
		}
	}
	if !b.Retry.IsZero() {
		out += " retry" + b.RetryFor(Card{}).String()
	}
	return out
}
