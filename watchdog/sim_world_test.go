package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	"github.com/leasekeeper/leasekeeper/pidprobe/pidprobetest"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
	"github.com/leasekeeper/leasekeeper/watchdog"
)

const (
	simLease = 30 * time.Second
	// simHorizon is the fleet's un-leased horizon in the simulation: the
	// shortest the store accepts is one lease; two let a run of a few
	// hundred steps (some minutes of simulated time) reach it often.
	simHorizon = 2 * simLease
	simTick    = simLease / 3
	// simMaxWorkers bounds the worker processes alive at once.
	simMaxWorkers = 8
	// simOperator is the actor of every operator write.
	simOperator = "cli"
)

// simT0 is where every simulated clock starts: a fixed instant, so a seed
// replays with the same times (and, on the fleet, the same epochs, which
// are floored at the server's clock in milliseconds).
var simT0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

type simVariant string

const (
	simBolt  simVariant = "bolt"
	simMongo simVariant = "mongo"
)

// simClock is one clock of the simulation: the true simulated time, offset
// and drifting at a fixed rate, read in whole seconds.
//
// Whole seconds make every comparison deterministic on the MongoDB twin,
// which counts the round trip of its clock reading against the lease it
// stamps (a few real milliseconds that vary from run to run): with every
// clock on a one-second grid, a lease ending "one round trip before" a
// grid instant compares exactly as one ending on it would, whatever the
// round trip was, as long as it stays under a second.
type simClock struct {
	w      *simWorld
	offset time.Duration
	ppm    int64 // drift, in parts per million of the elapsed true time
}

func (c *simClock) Now() time.Time {
	el := time.Duration(c.w.elapsed.Load())
	el += time.Duration(int64(el) / 1_000_000 * c.ppm)
	return simT0.Add(c.offset + el).Truncate(time.Second)
}

// simProfile is the shape of one seed's world, drawn from the seed.
type simProfile struct {
	cards    int
	batch    int
	interval time.Duration
	// skew bounds how far an agent's clock is set from the store's.
	skew time.Duration
	// faults scales the weight of every fault action.
	faults float64
	// linger is the share of workers that park their run (paused,
	// cancelled, a continuation armed) and keep the claim.
	linger float64
	steps  int
}

func drawProfile(rng *rand.Rand, v simVariant) simProfile {
	p := simProfile{
		cards:    8 + rng.IntN(5),
		batch:    100,
		interval: time.Duration(20+rng.IntN(41)) * time.Second,
		skew:     2 * time.Second,
		faults:   0.5 + rng.Float64(),
		linger:   0.1 + 0.3*rng.Float64(),
		steps:    400,
	}
	if rng.IntN(2) == 0 {
		p.batch = 1 + rng.IntN(3)
	}
	if v == simMongo {
		p.steps = 250
		if rng.IntN(2) == 0 {
			p.skew = 60 * time.Second
		}
	}
	return p
}

// simHost is one machine: its clock (every agent on it reads it; on the
// local twin the store reads it too), its process table and its agents'
// connection to the store.
type simHost struct {
	name    string
	clock   *simClock
	probe   *pidprobetest.Fake
	store   board.Store
	slots   int // how many agents the host runs at once
	nextPID int
}

func (h *simHost) spawnPID() int {
	h.nextPID++
	return h.nextPID
}

// simAgent is one leasekeeper agent: a heartbeat loop and a reaper, both
// real, over a simStore.
type simAgent struct {
	w      *simWorld
	host   *simHost
	pid    int
	marker string
	st     *simStore
	loop   *heartbeat.Loop
	reaper *watchdog.Reaper
	dead   bool
	// pausedUntil is the true elapsed time the agent resumes at (SIGSTOP
	// then SIGCONT); zero when it runs.
	pausedUntil time.Duration
	nextTick    time.Duration
	nextPass    time.Duration
	lost        []heartbeat.Lost
	// starve counts, per expired claim, the passes of this agent that saw
	// it expired and did not list it (see checkStarvation).
	starve map[string]int
}

func (a *simAgent) live() bool { return !a.dead && a.pausedUntil == 0 }

type workerPhase int

const (
	phClaim workerPhase = iota
	phStart
	phMove
	phRun
	phFile
	phRelease
	phParked // a lingering worker that parked its run: it only waits
)

type workerPlan int

const (
	planFinish workerPlan = iota
	planFail
	planResumable
	planLinger
)

func (p workerPlan) String() string {
	return [...]string{"finish", "fail", "fail resumable", "park its run"}[p]
}

// simWorker is one worker process, driven through the same requests the
// socket layer's worker flow makes (claim; start run = fence check,
// CreateRun, SetLastRunOwned; move into the running column; run updates;
// the verdict, the filing and the release, as `leasekeeper claim` routes
// them).
type simWorker struct {
	id     int
	host   *simHost
	agent  *simAgent
	pid    int
	start  int64
	marker string
	alive  bool
	phase  workerPhase
	plan   workerPlan

	card   string
	tok    board.ClaimToken
	state  string // the card's state when claimed
	run    string
	status board.RunStatus
	cont   board.Continuation

	// filing: where phFile moves the card, with which reason and source.
	fileTo, fileFrom string
	fileReason       board.Reason
}

// simWorld is one seed's simulation.
type simWorld struct {
	t     *testing.T
	ctx   context.Context
	v     simVariant
	seed  uint64
	rng   *rand.Rand
	prof  simProfile
	fleet bool
	// missedSince: per expired claim, since when (true time) the passes of
	// every agent have seen it expired and left it unlisted (checked by
	// checkFleetStarvation); lastPass is the true time of the last pass.
	missedSince map[string]time.Duration
	lastPass    time.Duration
	b           board.Board

	elapsed atomic.Int64 // true simulated time since simT0, in ns
	step    int

	storeClock *simClock
	// truth is the store without faults: the operator's writes and the
	// checks' reads go through it.
	truth   board.Store
	foreign *mongo.Collection // fleet only: the raw cards collection

	hosts   []*simHost
	agents  []*simAgent
	workers []*simWorker
	cardIDs []string
	runSeq  int

	m simModel

	trace []string
	hist  map[string][]string
	// violated: every invariant the seed broke, in the order it first
	// broke them. Each is reported once, at its first violation; the seed
	// runs on, so one defect does not hide another behind it.
	violated []string
	failed   bool
	// quiet reports a violation in the trace only (the replay test runs
	// seeds for their traces, not their verdicts).
	quiet bool
}

func (w *simWorld) now() time.Duration { return time.Duration(w.elapsed.Load()) }

func newSimWorld(t *testing.T, v simVariant, seed uint64, steps int) *simWorld {
	w := &simWorld{
		t: t, ctx: t.Context(), v: v, seed: seed,
		rng:   rand.New(rand.NewPCG(seed, 0x5eed_1ea5e)),
		fleet: v == simMongo,
		hist:  map[string][]string{},
	}
	w.prof = drawProfile(w.rng, v)
	if steps > 0 {
		w.prof.steps = steps
	}
	w.m.init()
	w.storeClock = &simClock{w: w, ppm: w.drift(200)}
	switch v {
	case simBolt:
		w.setupBolt()
	case simMongo:
		w.setupMongo()
	}
	b, err := w.truth.LoadBoard(w.ctx)
	if err != nil {
		t.Fatalf("LoadBoard: %v", err)
	}
	w.b = b
	w.tracef("profile: %d cards, batch %d, reaper every %s, agent clock skew up to %s, faults ×%.2f, lingering workers %.0f%%",
		w.prof.cards, w.prof.batch, w.prof.interval, w.prof.skew, w.prof.faults, 100*w.prof.linger)
	for _, h := range w.hosts {
		w.tracef("host %s: clock offset %s, drift %dppm", h.name, h.clock.offset, h.clock.ppm)
		for range h.slots {
			w.startAgent(h)
		}
	}
	w.createCards()
	w.observe(nil)
	return w
}

func (w *simWorld) drift(maxPPM int) int64 { return int64(w.rng.IntN(2*maxPPM+1) - maxPPM) }

// setupBolt: one host, whose clock the store reads too (the local twin's
// store is a file of the agent's own host), and two agents on it sharing
// the file.
func (w *simWorld) setupBolt() {
	h := &simHost{name: "local", clock: w.storeClock, probe: &pidprobetest.Fake{}, slots: 2, nextPID: 1000}
	s, err := boltstore.Open(filepath.Join(w.t.TempDir(), "board.db"), boltstore.Options{Board: board.DefaultBoard(true), Clock: w.storeClock})
	if err != nil {
		w.t.Fatalf("boltstore.Open: %v", err)
	}
	w.t.Cleanup(func() { _ = s.Close() })
	h.store, w.truth = s, s
	w.hosts = []*simHost{h}
}

// setupMongo: three hosts with one agent each, each host its own client
// of one database, all through one clock proxy that tells the store's clock
// as the server's (the twin reads the server's time from nowhere else).
func (w *simWorld) setupMongo() {
	uri := mongotest.ClockProxy(w.t, w.storeClock)
	db := mongotest.Database(w.t)
	open := func() *mongostore.Store {
		ctx, cancel := context.WithTimeout(w.ctx, time.Minute)
		defer cancel()
		s, err := mongostore.Open(ctx, mongostore.Options{
			URI: uri, Database: db, Lease: simLease, UnleasedHorizon: simHorizon, EventLag: serializedServer,
			// Readings of the server's clock age by the simulated time.
			Clock: w.storeClock,
		})
		if err != nil {
			w.t.Fatalf("mongostore.Open: %v", err)
		}
		w.t.Cleanup(func() { _ = s.Close() })
		return s
	}
	w.truth = open()
	w.foreign = mongotest.Client(w.t).Database(db).Collection("cards")
	for _, name := range []string{"hosta", "hostb", "hostc"} {
		off := time.Duration(w.rng.Int64N(int64(2*w.prof.skew)/int64(time.Second)+1))*time.Second - w.prof.skew
		w.hosts = append(w.hosts, &simHost{
			name: name, clock: &simClock{w: w, offset: off, ppm: w.drift(500)},
			probe: &pidprobetest.Fake{}, store: open(), slots: 1, nextPID: 1000,
		})
	}
}

func (w *simWorld) createCards() {
	for i := range w.prof.cards {
		id := fmt.Sprintf("c%02d", i+1)
		var deps []string
		if i >= 2 && w.rng.Float64() < 0.4 {
			for _, j := range w.rng.Perm(i)[:1+w.rng.IntN(2)] {
				deps = append(deps, w.cardIDs[j])
			}
			slices.Sort(deps)
			deps = slices.Compact(deps)
		}
		c, err := w.truth.CreateCard(w.ctx, board.CreateCardParams{ID: id, DependsOn: deps, Actor: simOperator})
		if err != nil {
			w.t.Fatalf("CreateCard %s: %v", id, err)
		}
		w.cardIDs = append(w.cardIDs, id)
		w.note(id, "created in %s, depends on %v", c.State, deps)
	}
}

func (w *simWorld) startAgent(h *simHost) *simAgent {
	a := &simAgent{w: w, host: h, pid: h.spawnPID(), starve: map[string]int{}}
	a.marker = board.WorkerMarker(h.name, a.pid)
	a.st = &simStore{inner: h.store, a: a, crashIn: -1, trace: w.tracef}
	lease := func() time.Duration { return simLease }
	loop, err := heartbeat.New(heartbeat.Config{
		Store: a.st, Clock: h.clock, Lease: lease, Prober: h.probe,
		OnLost: func(l heartbeat.Lost) { a.lost = append(a.lost, l) },
	})
	if err != nil {
		w.t.Fatalf("heartbeat.New: %v", err)
	}
	r, err := watchdog.New(watchdog.Config{
		Store: a.st, Marker: a.marker, Host: h.name,
		Interval: w.prof.interval, Batch: w.prof.batch,
		// One card at a time: the pass's writes then come in one order,
		// which is what lets a seed replay exactly.
		Workers: 1,
		Lease:   lease,
		Enabled: func() bool { return true },
		Fleet:   w.fleet, UnleasedHorizon: simHorizon,
		Prober: h.probe,
	})
	if err != nil {
		w.t.Fatalf("watchdog.New: %v", err)
	}
	a.loop, a.reaper = loop, r
	a.nextTick = w.now() + simTick
	a.nextPass = w.now() + time.Duration(w.rng.Int64N(int64(w.prof.interval)))
	w.agents = append(w.agents, a)
	w.tracef("agent %s starts on %s", a.marker, h.name)
	return a
}

// run plays the seed's steps, checking every invariant after each.
// A violation does not stop the seed (see violated).
func (w *simWorld) run() {
	for w.step = 1; w.step <= w.prof.steps; w.step++ {
		w.observe(w.act())
	}
}

// act runs one step: a due heartbeat tick or reaper pass when there is one,
// else one action drawn by weight. It returns the runs the step may have
// changed, for observe to re-read.
func (w *simWorld) act() []string {
	var due []*simAgent
	for _, a := range w.agents {
		if a.live() && (a.nextTick <= w.now() || a.nextPass <= w.now()) {
			due = append(due, a)
		}
	}
	if len(due) > 0 {
		a := due[w.rng.IntN(len(due))]
		if a.nextTick <= w.now() && (a.nextPass > w.now() || w.rng.IntN(2) == 0) {
			w.tick(a)
			return nil
		}
		return w.pass(a)
	}

	type action struct {
		weight float64
		do     func() []string
	}
	f := w.prof.faults
	acts := []action{
		{30, func() []string { w.advance(); return nil }},
		{8, func() []string { w.spawnWorker(); return nil }},
		{30, w.stepSomeWorker},
		{3 * f, func() []string { w.killWorker(); return nil }},
		{3 * f, func() []string { w.loseReply(); return nil }},
		{1 * f, func() []string { w.crashAgent(); return nil }},
		{1 * f, func() []string { w.pauseAgent(); return nil }},
		{4, func() []string { w.restartAgent(); return nil }},
		{1.5, func() []string { w.operatorRelease(); return nil }},
		{1.5, func() []string { w.operatorMove(); return nil }},
		{3, func() []string { w.operatorReopen(); return nil }},
	}
	if w.fleet {
		acts = append(acts, action{1.5 * f, func() []string { w.foreignStrip(); return nil }})
	}
	var total float64
	for _, a := range acts {
		total += a.weight
	}
	x := w.rng.Float64() * total
	for _, a := range acts {
		if x < a.weight {
			return a.do()
		}
		x -= a.weight
	}
	return acts[0].do()
}

// advance moves true time on and applies what time alone does: a paused
// agent resumes when its pause ends, and a worker whose agent is paused or
// dead stops by itself at the deadline the agent last vouched for (the
// client library cancels on its own when it cannot hear the agent).
func (w *simWorld) advance() {
	dt := time.Duration(1+w.rng.IntN(6)) * time.Second
	if w.rng.IntN(10) == 0 {
		dt = time.Duration(8+w.rng.IntN(18)) * time.Second
	}
	w.elapsed.Add(int64(dt))
	w.tracef("time +%s → %s (store clock %s)", dt, w.now(), w.storeClock.Now().Format(time.TimeOnly))
	for _, a := range w.agents {
		if !a.dead && a.pausedUntil != 0 && a.pausedUntil <= w.now() {
			a.pausedUntil = 0
			w.tracef("agent %s resumes", a.marker)
		}
	}
	for _, k := range w.workers {
		if !k.alive || k.tok.IsZero() || k.agent.live() {
			continue
		}
		if c, ok := k.agent.loop.Lookup(k.card); !ok || !k.agent.host.clock.Now().Before(c.TrustedUntil) {
			w.stopWorker(k, "its agent went silent and the trusted deadline passed: the client cancelled")
		}
	}
}

func (w *simWorld) tick(a *simAgent) {
	res := a.loop.RunOnce(w.ctx)
	a.nextTick = w.now() + simTick
	w.tracef("tick %s: held %d, renewed %d, lost %d, err %v", a.marker, res.Held, res.Renewed, len(res.Lost), res.Err)
	lost := a.lost
	a.lost = nil
	for _, l := range lost {
		tok := board.ClaimToken{Marker: l.Marker, Epoch: l.Epoch}
		w.note(l.Card, "%s declares %s@%d lost: %s", a.marker, l.Marker, l.Epoch, l.Reason)
		for _, k := range w.workers {
			if k.alive && k.card == l.Card && k.tok == tok {
				w.claimLost(k, string(l.Reason))
			}
		}
	}
	w.reapDeadAgent(a)
}

func (w *simWorld) reapDeadAgent(a *simAgent) {
	if a.dead || !a.st.crashed {
		return
	}
	a.dead = true
	w.tracef("agent %s is dead", a.marker)
	for _, k := range w.workers {
		if k.alive && k.agent == a {
			w.stopWorker(k, "its agent died")
		}
	}
}

// pass runs one real reaper pass and checks what only a pass can break.
func (w *simWorld) pass(a *simAgent) []string {
	a.nextPass = w.now() + w.prof.interval
	before := w.beforePass(a)
	res, err := a.reaper.RunOnce(w.ctx, false)
	w.tracef("pass %s (agent clock %s): %d listed (share %d of %d), %d swept, err %v", a.marker, a.host.clock.Now().Format(time.TimeOnly), len(res.Cards), res.ShareIndex, res.Reapers, len(res.Sweeps), err)
	for _, cr := range res.Cards {
		msg := fmt.Sprintf("pass %s: listed %s@%d run %q, pre-check %s, decision %s → %s", a.marker, cr.Prev.Marker, cr.Prev.Epoch, cr.Run, cr.PreCheck.Rule, cr.Decision.Rule, cr.Outcome)
		if cr.FiledTo != "" {
			msg += " filed to " + cr.FiledTo
		}
		if !cr.Token.IsZero() {
			msg += fmt.Sprintf(" (recovery %s@%d)", cr.Token.Marker, cr.Token.Epoch)
		}
		if cr.Error != "" {
			msg += " error: " + cr.Error
		}
		w.note(cr.Card, "%s", msg)
	}
	for _, sr := range res.Sweeps {
		msg := fmt.Sprintf("pass %s: %s sweep of %s → %s", a.marker, sr.Sweep, sr.Marker, sr.Outcome)
		if sr.Decision != nil {
			msg += " (" + string(sr.Decision.Rule) + ")"
		}
		w.note(sr.Card, "%s", msg)
	}
	crashed := a.st.crashed
	w.reapDeadAgent(a)
	// afterPass re-reads every recorded run itself.
	w.afterPass(a, before, res, crashed)
	return nil
}

func (w *simWorld) liveAgents() []*simAgent {
	var out []*simAgent
	for _, a := range w.agents {
		if a.live() {
			out = append(out, a)
		}
	}
	return out
}

func (w *simWorld) spawnWorker() {
	alive := 0
	for _, k := range w.workers {
		if k.alive {
			alive++
		}
	}
	agents := w.liveAgents()
	if alive >= simMaxWorkers || len(agents) == 0 {
		w.advance()
		return
	}
	a := agents[w.rng.IntN(len(agents))]
	k := &simWorker{id: len(w.workers) + 1, host: a.host, agent: a, pid: a.host.spawnPID(), alive: true}
	k.start = a.host.clock.Now().UnixMilli()
	k.marker = board.WorkerMarker(a.host.name, k.pid)
	a.host.probe.Spawn(k.pid, k.start)
	switch x := w.rng.Float64(); {
	case x < w.prof.linger:
		k.plan = planLinger
	case x < w.prof.linger+0.15:
		k.plan = planFail
	case x < w.prof.linger+0.35:
		k.plan = planResumable
	default:
		k.plan = planFinish
	}
	w.workers = append(w.workers, k)
	w.tracef("worker %s starts under agent %s (plan: %s)", k.marker, a.marker, k.plan)
	w.workerStep(k)
}

func (w *simWorld) stepSomeWorker() []string {
	var ready []*simWorker
	for _, k := range w.workers {
		if k.alive && k.agent.live() && k.phase != phParked {
			ready = append(ready, k)
		}
	}
	if len(ready) == 0 {
		w.advance()
		return nil
	}
	k := ready[w.rng.IntN(len(ready))]
	w.workerStep(k)
	if k.run != "" {
		return []string{k.run}
	}
	return nil
}

// stopWorker ends a worker process: it does nothing more and its pid is
// gone from its host's process table.
func (w *simWorld) stopWorker(k *simWorker, why string) {
	if !k.alive {
		return
	}
	k.alive = false
	k.host.probe.Kill(k.pid)
	if k.card != "" {
		w.note(k.card, "worker %s exits: %s", k.marker, why)
	} else {
		w.tracef("worker %s exits: %s", k.marker, why)
	}
}

// tracked is the socket layer's own check before an owner write: the agent
// holds the claim for this process.
func (w *simWorld) tracked(k *simWorker) bool {
	c, ok := k.agent.loop.Lookup(k.card)
	return ok && c.Hold.Token == k.tok
}

// claimLost: the worker learned its claim is gone. Now and then it sends
// one late owner write with its stale token straight at the store, as a
// worker that missed the news would; the fence must refuse it.
func (w *simWorld) claimLost(k *simWorker, why string) {
	if !k.alive {
		return
	}
	cur := w.m.cards[k.card]
	if k.agent.live() && cur.Token() != k.tok && w.rng.IntN(2) == 0 {
		st := k.agent.st
		switch w.rng.IntN(3) {
		case 0:
			w.ownerWrite(k, "late SetStateOwned → failed", false, func() error {
				_, err := st.SetStateOwned(w.ctx, board.SetStateOwnedParams{Card: k.card, Token: k.tok, To: board.StateFailed, Reason: board.ReasonRunFailed})
				return err
			})
		case 1:
			w.ownerWrite(k, "late SetLastRunOwned", false, func() error {
				return st.SetLastRunOwned(w.ctx, board.SetLastRunOwnedParams{Card: k.card, Token: k.tok, RunID: "late-" + k.marker})
			})
		default:
			w.ownerWrite(k, "late ReleaseOwned", true, func() error { return st.ReleaseOwned(w.ctx, board.OwnedParams{Card: k.card, Token: k.tok}) })
		}
	}
	w.stopWorker(k, "claim lost ("+why+")")
}

// ownerWrite makes one fenced owner write for k and checks the fence: a
// write under a token that is not the card's current claim must be
// refused. release marks ReleaseOwned, which is nil on a free card by
// contract.
func (w *simWorld) ownerWrite(k *simWorker, what string, release bool, write func() error) error {
	pre := w.m.cards[k.card].Token()
	err := write()
	w.note(k.card, "worker %s@%d %s → %v", k.marker, k.tok.Epoch, what, err)
	if err == nil && pre != k.tok && (!release || pre.Marker != "") {
		w.violation(k.card, "fence", "%s by %s@%d was accepted while the card was held by %s@%d", what, k.marker, k.tok.Epoch, pre.Marker, pre.Epoch)
	}
	return err
}

// workerStep makes the worker's next request.
func (w *simWorld) workerStep(k *simWorker) {
	a := k.agent
	st := a.st
	ctx := w.ctx
	if k.phase != phClaim && !w.tracked(k) {
		w.claimLost(k, "the agent holds no claim for it any more")
		return
	}
	switch k.phase {
	case phClaim:
		attempt := a.host.clock.Now()
		var (
			c   board.Card
			tok board.ClaimToken
			err error
		)
		if w.rng.IntN(3) > 0 {
			c, err = st.ClaimNext(ctx, board.ClaimNextParams{Marker: k.marker, Lease: simLease})
			tok = c.Token()
			if err == nil {
				w.note(c.ID, "worker %s ClaimNext → %s@%d (card in %s)", k.marker, tok.Marker, tok.Epoch, c.State)
				w.checkClaimNext(c.ID)
			}
		} else {
			// By id, as `leasekeeper claim ID` does — any card but one
			// waiting on its blockers, which nobody launches by hand here
			// (so a dependent leaves waiting_deps only by promotion).
			var ids []string
			for _, id := range w.cardIDs {
				if w.m.cards[id].State != board.StateWaitingDeps {
					ids = append(ids, id)
				}
			}
			if len(ids) == 0 {
				w.stopWorker(k, "nothing to claim")
				return
			}
			id := ids[w.rng.IntN(len(ids))]
			c, err = st.Claim(ctx, board.ClaimParams{Card: id, Marker: k.marker, Lease: simLease})
			tok = c.Token()
			if err == nil {
				c, err = st.GetCard(ctx, board.GetCardParams{ID: id})
			}
			w.note(id, "worker %s Claim → %s@%d, %v", k.marker, tok.Marker, tok.Epoch, err)
		}
		if err != nil {
			w.stopWorker(k, fmt.Sprintf("claim refused: %v", err))
			return
		}
		if err := a.loop.Add(board.Hold{Card: c.ID, Token: tok}, heartbeat.Owner{PID: k.pid, Start: pidprobetest.ID(k.start)}, attempt, simLease); err != nil {
			w.t.Fatalf("heartbeat Add: %v", err)
		}
		k.card, k.tok, k.state, k.phase = c.ID, tok, c.State, phStart

	case phStart:
		// handleStartRun: check the fence, create the run owned by the
		// token, stamp it on the card.
		cur, err := st.GetCard(ctx, board.GetCardParams{ID: k.card})
		if err != nil || cur.Token() != k.tok {
			w.claimLost(k, "start run: the card's claim moved on")
			return
		}
		w.runSeq++
		run := board.Run{
			ID: fmt.Sprintf("r%03d", w.runSeq), Card: k.card, Status: board.RunRunning,
			Owner: k.tok.Marker, Epoch: k.tok.Epoch, Host: k.host.name, PID: k.pid, PIDStart: k.start, PIDStartTicks: k.start, BootID: pidprobetest.Boot,
		}
		if w.rng.IntN(8) == 0 {
			run.Status = board.RunQueued
		}
		if k.plan == planResumable || w.rng.IntN(3) == 0 {
			run.Checkpoint = "ckpt"
		}
		w.m.started(k, run.ID)
		_, err = st.CreateRun(ctx, board.CreateRunParams{Token: k.tok, Run: run})
		w.note(k.card, "worker %s@%d CreateRun %s (%s) → %v", k.marker, k.tok.Epoch, run.ID, run.Status, err)
		if err != nil {
			w.releaseAndExit(k, "start run failed")
			return
		}
		k.run, k.status, k.cont = run.ID, run.Status, board.ContinuationNone
		if err := w.ownerWrite(k, "SetLastRunOwned "+run.ID, false, func() error {
			return st.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: k.card, Token: k.tok, RunID: run.ID})
		}); err != nil {
			failed, code := board.RunFailed, "CLAIM_LOST_AT_START"
			_, uerr := st.UpdateRun(ctx, board.UpdateRunParams{ID: run.ID, Status: &failed, FailureCode: &code, Actor: k.marker})
			w.note(k.card, "worker %s closes %s as failed: %v", k.marker, run.ID, uerr)
			w.releaseAndExit(k, "stamping the run failed")
			return
		}
		k.phase = phMove

	case phMove:
		running := w.b.Running()
		if k.state != running {
			if err := w.ownerWrite(k, "SetStateOwned → "+running, false, func() error {
				_, err := st.SetStateOwned(ctx, board.SetStateOwnedParams{Card: k.card, Token: k.tok, To: running})
				return err
			}); err != nil {
				w.updateRun(k, board.RunFailed, "")
				// As the claim command does: the move may have landed,
				// so it is undone (a no-op if not) before the release;
				// if that cannot be confirmed the claim is left to expire.
				if !errors.Is(err, board.ErrClaimConflict) {
					if berr := w.ownerWrite(k, "SetStateOwned → "+k.state, false, func() error {
						_, err := st.SetStateOwned(ctx, board.SetStateOwnedParams{Card: k.card, Token: k.tok, To: k.state})
						return err
					}); berr != nil {
						w.stopWorker(k, "moving into the running column failed, and so did moving back")
						return
					}
				}
				w.releaseAndExit(k, "moving into the running column failed")
				return
			}
		}
		k.phase = phRun

	case phRun:
		if k.plan == planLinger || w.rng.IntN(3) == 0 {
			w.changeRun(k)
			return
		}
		w.finishRun(k)

	case phFile:
		if err := w.ownerWrite(k, fmt.Sprintf("SetStateOwned → %s (%s)", k.fileTo, k.fileReason), false, func() error {
			_, err := st.SetStateOwned(ctx, board.SetStateOwnedParams{Card: k.card, Token: k.tok, To: k.fileTo, From: k.fileFrom, Reason: k.fileReason})
			return err
		}); err != nil {
			w.stopWorker(k, "filing failed")
			return
		}
		k.phase = phRelease

	case phRelease:
		if err := w.ownerWrite(k, "ReleaseOwned", true, func() error { return st.ReleaseOwned(ctx, board.OwnedParams{Card: k.card, Token: k.tok}) }); err != nil {
			w.stopWorker(k, "release failed")
			return
		}
		a.loop.Remove(k.card)
		w.stopWorker(k, "done")
	}
}

func (w *simWorld) releaseAndExit(k *simWorker, why string) {
	err := w.ownerWrite(k, "ReleaseOwned", true, func() error { return k.agent.st.ReleaseOwned(w.ctx, board.OwnedParams{Card: k.card, Token: k.tok}) })
	if err == nil {
		k.agent.loop.Remove(k.card)
	}
	w.stopWorker(k, why)
}

// updateRun is handleUpdateRun: the run's claim must still be the card's
// current one, then a compare-and-set on the status the worker last saw.
func (w *simWorld) updateRun(k *simWorker, to board.RunStatus, cont board.Continuation) error {
	cur, err := k.agent.st.GetCard(w.ctx, board.GetCardParams{ID: k.card})
	if err != nil {
		return err
	}
	if cur.Token() != k.tok {
		return board.Conflict(k.card, cur.Claim, cur.ClaimEpoch)
	}
	u := board.UpdateRunParams{ID: k.run, IfStatus: &k.status, Actor: k.marker}
	if to != "" {
		u.Status = &to
	}
	if cont != "" {
		u.Continuation = &cont
	}
	_, err = k.agent.st.UpdateRun(w.ctx, u)
	w.note(k.card, "worker %s@%d UpdateRun %s %s→%s%s → %v", k.marker, k.tok.Epoch, k.run, k.status, to, cont, err)
	if err == nil {
		if to != "" {
			k.status = to
		}
		if cont != "" {
			k.cont = cont
		}
	}
	return err
}

// changeRun moves the run to an intermediate status, or arms or clears a
// continuation. A lingering worker parks after a change that leaves its
// run kept by the table (paused, cancelled, a continuation armed).
func (w *simWorld) changeRun(k *simWorker) {
	var (
		to   board.RunStatus
		cont board.Continuation
	)
	switch w.rng.IntN(8) {
	case 0:
		to = board.RunPausedWaitingHuman
	case 1:
		to = board.RunPausedOperator
	case 2:
		to = board.RunCancelled
	case 3:
		to = board.RunQueued
	case 4:
		to = board.RunRunning
	case 5:
		cont = board.ContinuationRetryArmed
	case 6:
		cont = board.ContinuationRedeliveryPending
	default:
		cont = board.ContinuationNone
	}
	if err := w.updateRun(k, to, cont); err != nil {
		w.stopWorker(k, fmt.Sprintf("run update failed: %v", err))
		return
	}
	parked := k.status == board.RunPausedWaitingHuman || k.status == board.RunPausedOperator ||
		k.status == board.RunCancelled || k.cont.Armed()
	if k.plan == planLinger && parked && w.rng.IntN(2) == 0 {
		k.phase = phParked
	}
}

// finishRun records the verdict and plans the filing as `leasekeeper
// claim` routes an exit (finished → completion; failed → failed;
// resumable → released, back to the pool first where the running column
// is not one).
func (w *simWorld) finishRun(k *simWorker) {
	verdict := board.RunFinished
	switch k.plan {
	case planFail:
		verdict = board.RunFailed
	case planResumable:
		verdict = board.RunFailedResumable
	}
	if err := w.updateRun(k, verdict, ""); err != nil {
		w.stopWorker(k, fmt.Sprintf("recording the verdict failed: %v", err))
		return
	}
	k.fileFrom = ""
	switch verdict {
	case board.RunFinished:
		k.fileTo, k.fileReason, k.phase = w.b.Completion(), board.ReasonRunFinished, phFile
	case board.RunFailed:
		k.fileTo, k.fileReason, k.phase = board.StateFailed, board.ReasonRunFailed, phFile
	default:
		if w.b.IsPool(w.b.Running()) {
			k.phase = phRelease
		} else {
			k.fileTo, k.fileFrom, k.fileReason, k.phase = w.b.FirstPool(), w.b.Running(), board.ReasonNone, phFile
		}
	}
}

// Faults.

func (w *simWorld) killWorker() {
	var alive []*simWorker
	for _, k := range w.workers {
		if k.alive {
			alive = append(alive, k)
		}
	}
	if len(alive) == 0 {
		w.advance()
		return
	}
	w.stopWorker(alive[w.rng.IntN(len(alive))], "killed (SIGKILL)")
}

func (w *simWorld) someLiveAgent() *simAgent {
	agents := w.liveAgents()
	if len(agents) == 0 {
		return nil
	}
	return agents[w.rng.IntN(len(agents))]
}

func (w *simWorld) loseReply() {
	a := w.someLiveAgent()
	if a == nil {
		w.advance()
		return
	}
	a.st.lose = loseUnknown
	if w.rng.IntN(2) == 0 {
		a.st.lose = loseTransport
	}
	w.tracef("agent %s: the next reply will be lost (%d)", a.marker, a.st.lose)
}

func (w *simWorld) crashAgent() {
	a := w.someLiveAgent()
	if a == nil {
		w.advance()
		return
	}
	a.st.crashIn = w.rng.IntN(5)
	w.tracef("agent %s will be killed after %d more writes", a.marker, a.st.crashIn)
}

func (w *simWorld) pauseAgent() {
	a := w.someLiveAgent()
	if a == nil {
		w.advance()
		return
	}
	d := time.Duration(10+w.rng.IntN(91)) * time.Second
	a.pausedUntil = w.now() + d
	w.tracef("agent %s paused (SIGSTOP) for %s", a.marker, d)
}

func (w *simWorld) restartAgent() {
	for _, h := range w.hosts {
		running := 0
		for _, a := range w.agents {
			if a.host == h && !a.dead {
				running++
			}
		}
		if running < h.slots {
			w.startAgent(h)
			return
		}
	}
	w.advance()
}

// Operator and foreign writes.

func (w *simWorld) operatorRelease() {
	var held []string
	for _, id := range w.cardIDs {
		if w.m.cards[id].Claimed() {
			held = append(held, id)
		}
	}
	if len(held) == 0 {
		w.advance()
		return
	}
	id := held[w.rng.IntN(len(held))]
	c := w.m.cards[id]
	err := w.truth.Release(w.ctx, board.ReleaseParams{Card: id, Marker: c.Claim, Actor: simOperator})
	w.note(id, "operator force-releases %s@%d → %v", c.Claim, c.ClaimEpoch, err)
	if err == nil {
		w.m.revoked[c.Token()] = true
		w.m.operatorTouched(id, c.State)
	}
}

func (w *simWorld) operatorMove() {
	var movable []string
	for _, id := range w.cardIDs {
		if w.m.cards[id].State != board.StateWaitingDeps {
			movable = append(movable, id)
		}
	}
	if len(movable) == 0 {
		w.advance()
		return
	}
	id := movable[w.rng.IntN(len(movable))]
	// A person moves cards between their own columns, the pool and the
	// sinks; never into the running column or waiting_deps (both belong
	// to the machine: a launch and the blocker cascade).
	targets := []string{board.StateBacklog, board.StateReady, board.StateAwaitingInput, board.StateDone, board.StateFailed, board.StateBlocked, board.StateCancelled}
	to := targets[w.rng.IntN(len(targets))]
	from := w.m.cards[id].State
	err := w.truth.SetState(w.ctx, board.MoveParams{Card: id, To: to, Actor: simOperator})
	w.note(id, "operator moves %s → %s: %v", from, to, err)
	if err == nil {
		w.m.operatorTouched(id, to)
	}
}

func (w *simWorld) operatorReopen() {
	var sunk, withDependents []string
	for _, id := range w.cardIDs {
		if !w.b.IsTerminal(w.m.cards[id].State) {
			continue
		}
		sunk = append(sunk, id)
		if len(w.m.dependents(id)) > 0 {
			withDependents = append(withDependents, id)
		}
	}
	if len(sunk) == 0 {
		w.advance()
		return
	}
	pick := sunk
	if len(withDependents) > 0 && w.rng.IntN(2) == 0 {
		pick = withDependents
	}
	id := pick[w.rng.IntN(len(pick))]
	to := w.b.FirstPool()
	if w.rng.IntN(4) == 0 {
		to = board.StateBacklog
	}
	w.m.reopenStep[id] = w.step
	err := w.truth.Reopen(w.ctx, board.MoveParams{Card: id, To: to, Actor: simOperator})
	w.note(id, "operator reopens %s → %s: %v", w.m.cards[id].State, to, err)
	if err == nil {
		w.checkReopen(id)
		w.m.operatorTouched(id, to)
	}
}

// foreignStrip is another binary's whole-document write on the fleet: it
// drops the lease of a claimed card, leaving an un-leased claim behind.
func (w *simWorld) foreignStrip() {
	var held []string
	for _, id := range w.cardIDs {
		if c := w.m.cards[id]; c.Claimed() && !c.ClaimLeaseUntil.IsZero() {
			held = append(held, id)
		}
	}
	if len(held) == 0 {
		w.advance()
		return
	}
	id := held[w.rng.IntN(len(held))]
	_, err := w.foreign.UpdateOne(w.ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "claim_lease_until", Value: ""}}}})
	w.note(id, "a foreign binary strips the lease of %s: %v", w.m.cards[id].Claim, err)
}

// Reporting.

func (w *simWorld) tracef(format string, args ...any) {
	line := fmt.Sprintf("%4d %7s  ", w.step, w.now()) + fmt.Sprintf(format, args...)
	w.trace = append(w.trace, line)
	if *simTrace {
		w.t.Log(line)
	}
}

// note traces a line and files it in the card's history.
func (w *simWorld) note(card, format string, args ...any) {
	w.tracef("%s: %s", card, fmt.Sprintf(format, args...))
	if card == "" {
		return
	}
	h := append(w.hist[card], w.trace[len(w.trace)-1])
	if len(h) > 40 {
		h = h[len(h)-40:]
	}
	w.hist[card] = h
}

// violation reports the first broken invariant of the seed and stops it.
func (w *simWorld) violation(card, invariant, format string, args ...any) {
	if slices.Contains(w.violated, invariant) {
		return
	}
	w.failed = true
	w.violated = append(w.violated, invariant)
	var b strings.Builder
	fmt.Fprintf(&b, "invariant %q violated: %s\n", invariant, fmt.Sprintf(format, args...))
	fmt.Fprintf(&b, "  variant %s, seed %d, step %d (true time +%s)\n", w.v, w.seed, w.step, w.now())
	fmt.Fprintf(&b, "  replay: go test ./watchdog/ -run 'TestSim/%s' -sim.seed %d -v   (add -sim.trace for every step)\n", w.v, w.seed)
	if card != "" {
		fmt.Fprintf(&b, "  history of %s:\n", card)
		for _, l := range w.hist[card] {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	fmt.Fprintf(&b, "  last steps:\n")
	for _, l := range w.trace[max(0, len(w.trace)-12):] {
		fmt.Fprintf(&b, "    %s\n", l)
	}
	if w.quiet {
		w.tracef("%s", b.String())
		return
	}
	w.t.Error(b.String())
}
