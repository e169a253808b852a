package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/leasekeeper/leasekeeper/board"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

// The fleet twin's wire cost: how many commands (round trips) each verb of
// the MongoDB twin sends, how many of them are writes and how many
// statements those writes carry, counted by the driver's command monitor
// on the wire, never estimated. Counts, not timings: the test server is
// not MongoDB's speed (see section 6), but a command is a round trip on
// any server.

// tally is what one counted call sent.
type tally struct {
	commands   int
	writes     int // insert, update, delete, findAndModify (and bulkWrite)
	statements int // statements in those writes
	byName     map[string]int
}

func (t *tally) add(o tally) {
	t.commands += o.commands
	t.writes += o.writes
	t.statements += o.statements
	if t.byName == nil {
		t.byName = map[string]int{}
	}
	for k, v := range o.byName {
		t.byName[k] += v
	}
}

// breakdown names the commands, e.g. "find 2, update 1".
func (t tally) breakdown() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(t.byName)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, t.byName[k]))
	}
	return strings.Join(parts, ", ")
}

// wireCounter counts the commands one store's client sends while it is on.
// Each store has its own, so stores working side by side are counted apart.
type wireCounter struct {
	mu sync.Mutex
	on bool
	t  tally
}

func (w *wireCounter) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.on {
			return
		}
		w.t.commands++
		w.t.byName[e.CommandName]++
		if n, ok := writeStatements(e); ok {
			w.t.writes++
			w.t.statements += n
		}
	}}
}

// writeStatements is the number of statements a write command carries;
// ok is false for a command that is not a write.
func writeStatements(e *event.CommandStartedEvent) (n int, ok bool) {
	field := ""
	switch e.CommandName {
	case "insert":
		field = "documents"
	case "update":
		field = "updates"
	case "delete":
		field = "deletes"
	case "bulkWrite":
		field = "ops"
	case "findAndModify":
		return 1, true
	default:
		return 0, false
	}
	arr, isArr := e.Command.Lookup(field).ArrayOK()
	if !isArr {
		return 0, true
	}
	vals, _ := arr.Values()
	return len(vals), true
}

func (w *wireCounter) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.on = true
	w.t = tally{byName: map[string]int{}}
}

func (w *wireCounter) stop() tally {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.on = false
	return w.t
}

// countedStore is one agent's store with the counter on its client.
type countedStore struct {
	st *mongostore.Store
	wc *wireCounter
}

func openCounted(ctx context.Context, uri, db string) (*countedStore, error) {
	wc := &wireCounter{}
	// No event lag: the test server applies one command at a time
	// (mongostore.Options.EventLag); the lag changes no count.
	st, err := mongostore.Open(ctx, mongostore.Options{URI: uri, Database: db, Monitor: wc.monitor(), EventLag: -1})
	if err != nil {
		return nil, fmt.Errorf("open the MongoDB twin: %w", err)
	}
	return &countedStore{st: st, wc: wc}, nil
}

// count runs fn with the counter on. The cached board definition is
// re-read first, uncounted, so a re-read the store does once its cache is
// older than its TTL never lands in a count (it is per time, not per verb).
func (c *countedStore) count(ctx context.Context, fn func() error) (tally, error) {
	if _, err := c.st.LoadBoard(ctx); err != nil {
		return tally{}, err
	}
	c.wc.start()
	err := fn()
	return c.wc.stop(), err
}

// fleetSizes are the scenario's sizes.
type fleetSizes struct {
	repeat   int
	renewN   []int // holds per heartbeat tick
	agents   []int // stores working side by side
	perAgent int   // lifecycles each agent lives per measurement
	// reapAgents are the fleets of reapers side by side, expired the dead
	// host's expired claims they share.
	reapAgents []int
	expired    int
	dbPrefix   string
}

func fleetSizesFor(cfg config) fleetSizes {
	s := fleetSizes{repeat: cfg.repeat, renewN: []int{1, mongostore.RenewChunk, 100}, agents: []int{1, 4, 16}, perAgent: 4,
		reapAgents: []int{1, 4, 16}, expired: 48,
		dbPrefix: fmt.Sprintf("fleet%d", os.Getpid())}
	return s
}

func runFleet(ctx context.Context, cfg config, rep *report) error {
	uri, stop, err := startFerret(ctx)
	if err != nil {
		return err
	}
	defer stop()
	return measureFleet(ctx, uri, fleetSizesFor(cfg), rep)
}

// fleetRows are the three rows of one measured verb. clockApart: the
// verb's row leaves out a server-clock reading (hello) the call happened
// to make, which is one per second per agent however many calls it serves
// (DESIGN.md#twin-clock), so a count does not hang on when the last
// reading was taken; the side-by-side lifecycle rows count every one.
type fleetRows struct {
	commands, writes, statements *row
	clockApart                   bool
}

func (f fleetRows) record(t tally, per float64) {
	n := t.commands
	if f.clockApart {
		n -= t.byName["hello"]
	}
	f.commands.vals = append(f.commands.vals, float64(n)/per)
	f.writes.vals = append(f.writes.vals, float64(t.writes)/per)
	if f.statements != nil {
		f.statements.vals = append(f.statements.vals, float64(t.statements)/per)
	}
	f.commands.note = t.breakdown()
	if per != 1 {
		f.commands.note = "in all: " + f.commands.note
	}
}

func measureFleet(ctx context.Context, uri string, sz fleetSizes, rep *report) error {
	sec := rep.section("8. The fleet twin's wire cost per verb (MongoDB, counted)",
		`Commands the MongoDB twin's driver sends for one call of each verb, counted on the wire by the
driver's command monitor (store/mongo Options.Monitor), not estimated: every command is a round trip
to the server. Writes are the insert, update, delete and findAndModify commands among them;
statements are the statements those writes carry (a bulk update of k holds is one write of k
statements). The server is the project's FerretDB test server, but the counts are the twin's own and
hold on any MongoDB; timings are deliberately not shown (see section 6). The cached board
definition is re-read (uncounted) before each counted call, so its once-per-TTL re-read is never
in a count; likewise a verb's row leaves out the reading of the server's clock (hello) a call may
make, one per second per agent whatever it serves; the breakdown still names it, and the
side-by-side rows count every one. A heartbeat tick sends its renewals in bulk writes of at most store/mongo.RenewChunk
holds. The expired claim is released (or reclaimed) with the lease's end as the cutoff, the
precondition a reaper meets once the lease has passed. The side-by-side rows run whole lifecycles
(Start + Finish, the publishing of their events included) on 1, 4 and 16 stores, each with its own
client, on one database, all at once: a figure above the one-agent one is what contention costs
(compare-and-set retries). A lifecycle's last events wait in its card's outbox for the compactor,
whose pass (a query and two writes per page of up to 256 cards, plus its scan for outboxes an older
version left) is counted in the lifecycle rows, amortized over them.

The reaper rows run the fleet's reapers as its agents do (DESIGN.md#reaper-shares): 1, 4 and 16
agents on one database, each with its own store and client and its own watchdog.Reaper (the fleet's
dispositions, the gate on, the defaults otherwise, the board read from a cache as the agent's is),
each recorded among the live reapers by a first pass over nothing. Then a dead worker on another
host leaves its claims expired (a quarter with no run, a quarter with a finished run, a quarter with
a failed run, a quarter whose run still says running at a checkpoint; a write of the bench's own
ages them, as the twin has no verb that moves the server's clock), and every agent passes once, all
at once. Per agent per pass: the commands it sent (every one, the clock readings included) and the
cards its pass examined. For the fleet: examinations per expired card (every pass's cards over the
expired ones: 1 when the reapers share the work, one per agent when each lists every card),
transfers lost (a pass's skip of a card another reaper transferred first) and commands per card
decided (every pass's commands over the expired cards, each decided once). The idle reaper pass is
a pass over nothing once every reaper is recorded, averaged over the agents of all three fleets: the
reaper's record written, the records read, one query per arm of the listing; its reading of the
server's clock is left out as in the verb rows (in the agent, whose passes are a minute apart, each
pass reads it once).`)
	verb := func(name string, stmts bool) fleetRows {
		r := fleetRows{
			commands:   sec.add(name+": commands", "commands", nil),
			writes:     sec.add(name+": writes", "writes", nil),
			clockApart: true,
		}
		if stmts {
			r.statements = sec.add(name+": statements", "statements", nil)
		}
		return r
	}
	var (
		start    = verb("Start by id of a fresh card", true)
		finish   = verb("Finish → done", true)
		claim    = verb("Claim of a free card", true)
		release  = verb("ReleaseOwned", true)
		renew    = map[int]fleetRows{}
		together = map[int]fleetRows{}
	)
	for _, n := range sz.renewN {
		renew[n] = verb(fmt.Sprintf("heartbeat tick, RenewClaims of %s", plural(n, "claim")), true)
	}
	var (
		idle    = verb("idle Events() poll", false)
		expired = verb("reaper: ReleaseExpired of an expired claim", true)
		reclaim = verb("reaper: ReclaimExpired of an expired claim", true)
	)
	var anchor *row
	for _, a := range sz.agents {
		name := fmt.Sprintf("lifecycle (Start + Finish), %s side by side, per lifecycle (mean)", plural(a, "agent"))
		r := fleetRows{commands: sec.add(name+": commands", "commands", anchor), writes: sec.add(name+": writes", "writes", nil)}
		if anchor == nil {
			anchor = r.commands
		}
		together[a] = r
	}
	reaps := map[int]reapRows{}
	var perDecidedAnchor *row
	for _, a := range sz.reapAgents {
		name := fmt.Sprintf("reaper pass over a dead host's %d expired claims, %s side by side", sz.expired, plural(a, "agent"))
		r := reapRows{
			commands:   sec.add(name+", per agent per pass (mean): commands", "commands", nil),
			examined:   sec.add(name+", per agent per pass (mean): cards examined", "cards", nil),
			perCard:    sec.add(name+": examinations per expired card", "examinations", nil),
			lost:       sec.add(name+": transfers lost", "transfers", nil),
			perDecided: sec.add(name+": commands per card decided", "commands", perDecidedAnchor),
		}
		if perDecidedAnchor == nil {
			perDecidedAnchor = r.perDecided
		}
		reaps[a] = r
	}
	idleReap := verb("idle reaper pass (nothing expired), per agent per pass (mean)", false)
	reapOutcomes := map[int]map[string]int{} // the last repeat's

	cs, err := openCounted(ctx, uri, sz.dbPrefix+"_verbs")
	if err != nil {
		return err
	}
	defer cs.st.Close()
	st := cs.st
	marker := board.WorkerMarker("benchhost", 1000)
	recovery := board.RecoveryPrefix + board.WorkerMarker("benchreaper", 2000)
	create := func(id string) error {
		_, err := st.CreateCard(ctx, board.CreateCardParams{ID: id, State: board.StateReady})
		return err
	}

	// The heartbeat's holds are claimed once and renewed every repeat.
	maxN := slices.Max(sz.renewN)
	holds := make([]board.Hold, maxN)
	for i := range holds {
		id := fmt.Sprintf("held-%03d", i)
		if err := create(id); err != nil {
			return err
		}
		held, err := st.Claim(ctx, board.ClaimParams{Card: id, Marker: marker, Lease: benchLease})
		tok := held.Token()
		if err != nil {
			return fmt.Errorf("claim %s: %w", id, err)
		}
		holds[i] = board.Hold{Card: id, Token: tok}
	}

	for rp := range sz.repeat {
		id := func(what string) string { return fmt.Sprintf("%s-%d", what, rp) }

		// Start by id, then Finish → done.
		if err := create(id("life")); err != nil {
			return err
		}
		var started board.StartResult
		t, err := cs.count(ctx, func() (err error) {
			started, err = st.Start(ctx, board.StartParams{Card: id("life"), Marker: marker, Lease: benchLease, Run: board.Run{ID: id("life") + "-run"}})
			return err
		})
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		start.record(t, 1)
		t, err = cs.count(ctx, func() error {
			fin, err := st.Finish(ctx, board.FinishParams{Card: id("life"), Token: started.Token, RunID: started.Run.ID, Status: board.RunFinished})
			if err == nil && fin.Card.State != board.StateDone {
				err = fmt.Errorf("finished card is in %q, want %q", fin.Card.State, board.StateDone)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("finish: %w", err)
		}
		finish.record(t, 1)

		// Claim of a free card, then ReleaseOwned.
		if err := create(id("claim")); err != nil {
			return err
		}
		var tok board.ClaimToken
		t, err = cs.count(ctx, func() (err error) {
			var held board.Card
			held, err = st.Claim(ctx, board.ClaimParams{Card: id("claim"), Marker: marker, Lease: benchLease})
			tok = held.Token()
			return err
		})
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		claim.record(t, 1)
		t, err = cs.count(ctx, func() error { return st.ReleaseOwned(ctx, board.OwnedParams{Card: id("claim"), Token: tok}) })
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		release.record(t, 1)

		// Heartbeat ticks.
		for _, n := range sz.renewN {
			t, err = cs.count(ctx, func() error {
				res, err := st.RenewClaims(ctx, board.RenewClaimsParams{Holds: holds[:n], Lease: benchLease})
				if err != nil {
					return err
				}
				for _, r := range res {
					if r.Err != nil {
						return fmt.Errorf("renew %s: %w", r.Card, r.Err)
					}
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("renew %d: %w", n, err)
			}
			renew[n].record(t, 1)
		}

		// An idle poll: every event read (uncounted) first, then one more
		// poll that finds nothing new.
		evs, err := st.Events(ctx, board.EventsParams{After: 0, Limit: 0})
		if err != nil {
			return err
		}
		var last int64
		if len(evs) > 0 {
			last = evs[len(evs)-1].Seq
		}
		t, err = cs.count(ctx, func() error {
			evs, err := st.Events(ctx, board.EventsParams{After: last, Limit: 0})
			if err == nil && len(evs) != 0 {
				err = fmt.Errorf("idle poll after seq %d found %d events", last, len(evs))
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("events: %w", err)
		}
		idle.record(t, 1)

		// The reaper's writes on an expired claim.
		for _, what := range []string{"expired", "reclaimed"} {
			if err := create(id(what)); err != nil {
				return err
			}
			c, err := st.Claim(ctx, board.ClaimParams{Card: id(what), Marker: marker, Lease: benchLease})
			tok := c.Token()
			if err != nil {
				return err
			}
			cutoff := c.ClaimLeaseUntil
			if what == "expired" {
				t, err = cs.count(ctx, func() error {
					return st.ReleaseExpired(ctx, board.ReleaseExpiredParams{Card: id(what), Prev: tok, Cutoff: cutoff, State: board.StateReady, Actor: "bench-reaper"})
				})
				if err != nil {
					return fmt.Errorf("release expired: %w", err)
				}
				expired.record(t, 1)
				continue
			}
			t, err = cs.count(ctx, func() error {
				_, err := st.ReclaimExpired(ctx, board.ReclaimExpiredParams{Card: id(what), Prev: tok, RecoveryMarker: recovery, Cutoff: cutoff, Lease: benchLease})
				return err
			})
			if err != nil {
				return fmt.Errorf("reclaim expired: %w", err)
			}
			reclaim.record(t, 1)
		}

		// Whole lifecycles, agents side by side.
		for _, a := range sz.agents {
			t, n, err := fleetLifecycles(ctx, uri, fmt.Sprintf("%s_r%d_a%d", sz.dbPrefix, rp, a), a, sz.perAgent)
			if err != nil {
				return fmt.Errorf("%d agents: %w", a, err)
			}
			together[a].record(t, float64(n))
		}

		// The fleet's reapers, side by side.
		var idle tally
		idlePasses := 0
		for _, a := range sz.reapAgents {
			f, err := fleetReapers(ctx, uri, fmt.Sprintf("%s_r%d_reap%d", sz.dbPrefix, rp, a), a, sz.expired)
			if err != nil {
				return fmt.Errorf("%d reapers: %w", a, err)
			}
			reaps[a].record(f)
			reapOutcomes[a] = f.outcomes
			idle.add(f.idle)
			idlePasses += a
		}
		if idlePasses > 0 {
			idleReap.record(idle, float64(idlePasses))
		}
	}

	for _, a := range sz.reapAgents {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(reapOutcomes[a])) {
			parts = append(parts, fmt.Sprintf("%s %d", k, reapOutcomes[a][k]))
		}
		sec.notef("Outcomes of the last repeat's reaper passes, %s side by side (outcome/action): %s.", plural(a, "agent"), strings.Join(parts, ", "))
	}

	// The fleet's budgets (DESIGN.md#event-log).
	life := start.commands.vals.median() + finish.commands.vals.median()
	rep.goal("8. fleet", "Start + Finish ≤ 8 commands, events included",
		fmt.Sprintf("%s + %s = %s commands", num(start.commands.vals.median()), num(finish.commands.vals.median()), num(life)), life <= 8)
	// 2.5 s is agent.FleetEffectsPoll (the agent package is not among this
	// module's dependencies).
	idleN := idle.commands.vals.median()
	rep.goal("8. fleet", "an idle agent ≤ 1 command/s (its log read every 2.5 s)",
		fmt.Sprintf("%s commands per read = %s commands/s", num(idleN), num(idleN/2.5)), idleN/2.5 <= 1)
	alone := together[sz.agents[0]].commands
	for _, a := range sz.agents[1:] {
		m, lo, hi := together[a].commands.ratio()
		rep.goal("8. fleet", fmt.Sprintf("a lifecycle with %d agents side by side ≤ 1.25× one alone", a),
			fmt.Sprintf("%s vs %s commands = %s× (%s–%s)", num(together[a].commands.vals.median()), num(alone.vals.median()), num(m), num(lo), num(hi)), m <= 1.25)
	}
	// The reapers' sharing (DESIGN.md#reaper-shares): without it every
	// agent's pass examines every expired card, a agents a examinations.
	for _, a := range sz.reapAgents {
		if a == 1 {
			continue
		}
		r := reaps[a]
		ex := r.perCard.vals.median()
		rep.goal("8. fleet", fmt.Sprintf("reapers share the work: ≤ 1.25 examinations per expired card with %d agents", a),
			fmt.Sprintf("%s examinations per card (%s–%s), %s transfers lost, %s commands per card decided", num(ex), num(r.perCard.vals.min()), num(r.perCard.vals.max()),
				num(r.lost.vals.median()), num(r.perDecided.vals.median())), ex <= 1.25)
	}
	return nil
}

// fleetLifecycles opens agents stores on db, each with its own client,
// and has them live perAgent lifecycles each (Start + Finish of a fresh
// card) all at once. It returns what they sent in all and how many
// lifecycles that was.
func fleetLifecycles(ctx context.Context, uri, db string, agents, perAgent int) (tally, int, error) {
	stores := make([]*countedStore, agents)
	defer func() {
		for _, s := range stores {
			if s != nil {
				s.st.Close()
			}
		}
	}()
	for i := range stores {
		s, err := openCounted(ctx, uri, db)
		if err != nil {
			return tally{}, 0, err
		}
		stores[i] = s
	}
	card := func(a, i int) string { return fmt.Sprintf("agent%d-%d", a, i) }
	for a := range agents {
		for i := range perAgent {
			if _, err := stores[0].st.CreateCard(ctx, board.CreateCardParams{ID: card(a, i), State: board.StateReady}); err != nil {
				return tally{}, 0, err
			}
		}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total tally
		first error
		go_   = make(chan struct{})
	)
	for a, s := range stores {
		wg.Go(func() {
			<-go_
			marker := board.WorkerMarker("benchhost", 3000+a)
			for i := range perAgent {
				id := card(a, i)
				t, err := s.count(ctx, func() error {
					started, err := s.st.Start(ctx, board.StartParams{Card: id, Marker: marker, Lease: benchLease, Run: board.Run{ID: id + "-run"}})
					if err != nil {
						return fmt.Errorf("start %s: %w", id, err)
					}
					_, err = s.st.Finish(ctx, board.FinishParams{Card: id, Token: started.Token, RunID: started.Run.ID, Status: board.RunFinished})
					if err != nil {
						return fmt.Errorf("finish %s: %w", id, err)
					}
					return nil
				})
				mu.Lock()
				total.add(t)
				if err != nil && first == nil {
					first = err
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	close(go_)
	wg.Wait()
	if first != nil {
		return total, agents * perAgent, first
	}
	// The lifecycles' last events, still in their cards' outboxes, are
	// published by one compactor pass (the legacy look included), amortized
	// over them: an agent's compactor passes every 30 s.
	t, err := stores[0].count(ctx, func() error {
		_, err := stores[0].st.CompactEvents(ctx, time.Now().Add(time.Hour))
		return err
	})
	total.add(t)
	return total, agents * perAgent, err
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
