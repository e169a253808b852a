// Package nemesis_test is a seeded fault-injection test of leasekeeper in
// the spirit of Jepsen's nemesis and etcd's robustness tests
// (docs/DESIGN.md#nemesis): real agents on real stores, real `leasekeeper
// claim` processes running a real command, and a schedule of faults —
// kill -9 of claimers, of their commands, of agents and of store plugins,
// SIGSTOP of claimers past the lease, store pauses, operator
// force-releases — drawn from one seed. It records a history and checks
// the safety rules at the end.
//
// Replay a failing seed, or run longer:
//
//	go test -race ./internal/nemesis/ -run Nemesis -nemesis.seed=N -nemesis.duration=5m
package nemesis_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
)

var (
	seedFlag = flag.Uint64("nemesis.seed", 0, "seed of the nemesis schedule (0: time-based); a failing run prints its seed")
	durFlag  = flag.Duration("nemesis.duration", 0, "how long each backend's nemesis injects faults (0: 30s, 12s with -short)")
)

var binary, worker string

func TestMain(m *testing.M) {
	if spec := os.Getenv(crashWorkerEnv); spec != "" {
		// This binary run again as a worker of the crash test.
		os.Exit(crashWorkerMain(spec))
	}
	agentproc.Main(m, map[string]*string{
		"./cmd/leasekeeper":                &binary,
		"./internal/nemesis/nemesisworker": &worker,
	})
}

// The lease is short (3s is the shortest the agent accepts; the MongoDB-wire
// test server on a loaded two-core machine needs a little more to renew in
// time) and the reaper passes every second, so takeovers happen many times
// within a run.
const (
	boltLease      = 3 * time.Second
	mongoLease     = 5 * time.Second
	reaperInterval = time.Second
)

func TestNemesis(t *testing.T) {
	t.Parallel()
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	dur := *durFlag
	if dur == 0 {
		dur = 30 * time.Second
		if testing.Short() {
			dur = 12 * time.Second
		}
	}
	t.Logf("nemesis seed %d, %s of faults per backend (replay: -nemesis.seed=%d -nemesis.duration=%s)", seed, dur, seed, dur)
	// The two backends' rigs share nothing (each its own agents, sandboxes,
	// workers and schedule; the nemesis only touches processes it started)
	// and spend most of their time waiting on leases, so they run at the
	// same time, each in a subtest of its own, and alongside the crash
	// test. Subtests that are not parallel take no slot of -parallel, so
	// the two overlap whatever it is.
	var wg sync.WaitGroup
	wg.Go(func() {
		t.Run("Bolt", func(t *testing.T) {
			r := newRig(t, seed, dur, boltLease)
			r.addAgent("")
			r.run(3)
		})
	})
	wg.Go(func() {
		t.Run("Mongo", func(t *testing.T) {
			uri, db := mongotest.URI(t), mongotest.Database(t)
			r := newRig(t, seed+1, dur, mongoLease)
			store := fmt.Sprintf("store: {backend: mongo, uri: %q, database: %s}\n", uri, db)
			r.addAgent(store)
			r.addAgent(store)
			r.run(2)
		})
	})
	wg.Wait()
}

// mono is the host's CLOCK_MONOTONIC in nanoseconds. The workers stamp
// their history lines with the same clock: every process of the test runs
// on this one host, so one clock orders all their events and comparing
// stamps of different processes is sound.
func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// slot is one agent of the rig: its sandbox and its current run.
type slot struct {
	a    *agentproc.Agent
	proc *agentproc.Proc // nil while killed
}

// workerLoop runs `leasekeeper claim --next` again and again against one
// agent.
type workerLoop struct {
	idx     int
	hist    string
	agent   int
	mu      sync.Mutex
	claimer *exec.Cmd // the claim process running now, nil between claims
	exits   map[int]int
}

type interval struct{ from, to int64 }

type rig struct {
	t      *testing.T
	seed   uint64
	dur    time.Duration
	lease  time.Duration
	dir    string
	agents []*slot

	mu      sync.Mutex
	stopped map[int][]interval // claimer pid -> when it was SIGSTOPped
	paused  map[int]bool       // pids stopped now, resumed by the cleanup whatever happens
	log     []string           // what the nemesis did, stamped with mono()
	cards   int
}

func newRig(t *testing.T, seed uint64, dur, lease time.Duration) *rig {
	dir := t.TempDir()
	r := &rig{t: t, seed: seed, dur: dur, lease: lease, dir: dir, stopped: map[int][]interval{}, paused: map[int]bool{}}
	// A test that fails half-way must not leave a process stopped: a
	// stopped store plugin outlives its agent.
	t.Cleanup(r.resumeAll)
	return r
}

// addAgent prepares an agent whose store is storeYAML (empty: its own bbolt
// file) and starts it.
func (r *rig) addAgent(storeYAML string) {
	a := agentproc.New(r.t, binary, fmt.Sprintf("lease: %s\nreaper: {enabled: true, interval: %s}\n", r.lease, reaperInterval))
	if storeYAML != "" {
		cfg := fmt.Sprintf("socket: %s\n%slease: %s\nreaper: {enabled: true, interval: %s}\n", a.Socket, storeYAML, r.lease, reaperInterval)
		if err := os.WriteFile(a.Config, []byte(cfg), 0o600); err != nil {
			r.t.Fatal(err)
		}
	}
	// A restarted agent on the MongoDB-wire test server under load has been
	// seen to take over 20s before it serves (reading the event log's head
	// for its effects); the bound is generous so a slow start is not taken
	// for a failure.
	a.StartBound = 90 * time.Second
	s := &slot{a: a}
	s.proc = a.Start()
	r.agents = append(r.agents, s)
}

// resumeAll sends SIGCONT to every process the nemesis stopped and has not
// resumed yet.
func (r *rig) resumeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for pid := range r.paused {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	clear(r.paused)
}

// pause records that pid is stopped (or resumed).
func (r *rig) pause(pid int, stopped bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if stopped {
		r.paused[pid] = true
	} else {
		delete(r.paused, pid)
	}
}

func (r *rig) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, fmt.Sprintf("%d ", mono())+fmt.Sprintf(format, args...))
}

func (r *rig) client(i int) *client.Client { return &client.Client{Socket: r.agents[i].a.Socket} }

// up is the index of an agent that runs, or -1.
func (r *rig) up() int {
	for i, s := range r.agents {
		if s.proc != nil {
			return i
		}
	}
	return -1
}

// loop is worker w's life: claim the next card and run the worker command
// under the claim, until ctx ends. Its random choices come from its own
// stream of the seed.
func (r *rig) loop(ctx context.Context, w *workerLoop, wg *sync.WaitGroup) {
	defer wg.Done()
	rng := rand.New(rand.NewPCG(r.seed, uint64(w.idx)+1))
	for ctx.Err() == nil {
		// Most commands are short; one in four works for longer than a
		// lease, so a holder that cannot be stopped at its deadline shows
		// as an overlap the check can see.
		units, unitMS := 1+rng.IntN(5), 100+rng.IntN(250)
		if rng.IntN(4) == 0 {
			units, unitMS = 8+rng.IntN(8), 300+rng.IntN(300)
		}
		exit := 0
		if rng.IntN(8) == 0 {
			exit = 1
		}
		args := []string{"claim", "--next"}
		if rng.IntN(5) != 0 {
			args = append(args, "--resumable")
		}
		args = append(args, "--", worker, w.hist, strconv.Itoa(units), strconv.Itoa(unitMS), strconv.Itoa(exit))
		cmd := exec.Command(binary, args...)
		a := r.agents[w.agent].a
		cmd.Env, cmd.Dir = a.Environ(), a.Dir
		out := &agentproc.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			r.note("worker %d: start claim: %v", w.idx, err)
			return
		}
		w.mu.Lock()
		w.claimer = cmd
		w.mu.Unlock()
		err := cmd.Wait()
		w.mu.Lock()
		w.claimer = nil
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		}
		w.exits[code]++
		w.mu.Unlock()
		switch code {
		case 0, 1, 3, 4, 137:
		default:
			// Nothing to claim (122) or no agent (125): pace the retries.
			// This is a worker's back-off, not the test waiting on a
			// condition.
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		if code != 0 && code != 1 && code != 122 {
			r.note("worker %d: claim pid %d exit %d: %s", w.idx, cmd.Process.Pid, code, lastLines(out.String(), 3))
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// action is one step of the schedule.
type action struct {
	at     time.Duration
	kind   string
	target int
	param  time.Duration
}

// schedule draws the faults from the seed: when, which kind, which target
// and for how long. The same seed draws the same schedule; what a fault
// hits (which card a worker holds then) depends on timing.
func schedule(seed uint64, dur, lease time.Duration, agents, workers int) []action {
	rng := rand.New(rand.NewPCG(seed, 0x6e656d65))
	var plan []action
	for at := time.Duration(0); ; {
		at += time.Duration(300+rng.IntN(1200)) * time.Millisecond
		if at >= dur {
			break
		}
		a := action{at: at}
		switch k := rng.IntN(100); {
		case k < 22:
			a.kind, a.target = "kill-claimer", rng.IntN(workers)
		case k < 40:
			a.kind, a.target = "kill-cmd", rng.IntN(workers)
		case k < 52:
			a.kind, a.target = "kill-agent", rng.IntN(agents)
			a.param = time.Duration(200+rng.IntN(int(lease.Milliseconds()*3/2))) * time.Millisecond
		case k < 62:
			a.kind, a.target = "kill-plugin", rng.IntN(agents)
		case k < 70:
			a.kind, a.target = "pause-plugin", rng.IntN(agents)
			a.param = time.Duration(200+rng.IntN(int(lease.Milliseconds()*2/3))) * time.Millisecond
		case k < 80:
			a.kind, a.target = "stop-claimer", rng.IntN(workers)
			a.param = lease + time.Duration(rng.IntN(int(lease.Milliseconds())))*time.Millisecond
		case k < 86:
			// SIGSTOP of a claimer while an operator steals its card: the
			// claimer cannot stop its command at the deadline.
			a.kind, a.target = "stop-claimer-and-release", rng.IntN(workers)
			a.param = lease + time.Duration(rng.IntN(int(lease.Milliseconds())))*time.Millisecond
		default:
			a.kind, a.target = "force-release", rng.IntN(1<<20)
		}
		plan = append(plan, a)
	}
	return plan
}

// run drives the rig: perWorker worker loops per agent, the schedule, the
// recovery window, then the checks.
func (r *rig) run(perAgent int) {
	t := r.t
	t.Logf("seed %d", r.seed)
	// Runs before the agents' cleanups: a stopped plugin would hold its
	// agent's stop up.
	defer r.resumeAll()
	var workers []*workerLoop
	for i := range perAgent * len(r.agents) {
		workers = append(workers, &workerLoop{
			idx: i, agent: i % len(r.agents),
			hist:  filepath.Join(r.dir, fmt.Sprintf("worker%d.history", i)),
			exits: map[int]int{},
		})
	}
	plan := schedule(r.seed, r.dur, r.lease, len(r.agents), len(workers))
	t.Logf("%d faults scheduled over %s", len(plan), r.dur)

	r.topUp()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go r.loop(ctx, w, &wg)
	}
	stopWorkers := func() {
		cancel()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			for _, w := range workers {
				w.mu.Lock()
				if w.claimer != nil {
					_ = w.claimer.Process.Kill()
				}
				w.mu.Unlock()
			}
			<-done
		}
	}
	defer stopWorkers()

	// undo holds what a fault must put back (SIGCONT, an agent restart)
	// and when.
	type undo struct {
		at time.Time
		fn func()
		// plugin is 1 + the index of the agent whose stopped store
		// plugin fn resumes, else 0.
		plugin int
	}
	var undos []undo
	runUndos := func(all bool) {
		slices.SortFunc(undos, func(a, b undo) int { return a.at.Compare(b.at) })
		for len(undos) > 0 && (all || !time.Now().Before(undos[0].at)) {
			u := undos[0]
			undos = undos[1:]
			u.fn()
		}
	}
	begin := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastTopUp := time.Now()
	for i, act := range plan {
		for time.Since(begin) < act.at {
			<-tick.C
			runUndos(false)
			if time.Since(lastTopUp) > 300*time.Millisecond {
				r.topUp()
				lastTopUp = time.Now()
			}
		}
		runUndos(false)
		if time.Since(begin) > r.dur {
			// A slow agent restart ate the schedule's time: the run stays
			// bounded, the faults left are dropped.
			r.note("schedule over time: %d faults dropped", len(plan)-i)
			break
		}
		switch act.kind {
		case "kill-claimer":
			w := workers[act.target]
			w.mu.Lock()
			if w.claimer != nil {
				r.note("kill -9 claimer pid %d (worker %d)", w.claimer.Process.Pid, w.idx)
				_ = w.claimer.Process.Kill()
			}
			w.mu.Unlock()
		case "kill-cmd":
			w := workers[act.target]
			for _, pid := range findProcs(func(p procInfo) bool { return slices.Contains(p.args, w.hist) && p.args[0] == worker }) {
				r.note("kill -9 command pid %d (worker %d)", pid, w.idx)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		case "kill-agent":
			s, i := r.agents[act.target], act.target
			if s.proc == nil {
				continue
			}
			// A stopped plugin cannot die with its agent (its parent-death
			// signal waits for SIGCONT) and would keep the bbolt lock from
			// the restarted agent: resume it first.
			undos = slices.DeleteFunc(undos, func(u undo) bool {
				if u.plugin == i+1 {
					u.fn()
					return true
				}
				return false
			})
			r.note("kill -9 agent %d pid %d; restart in %s", i, s.proc.Pid(), act.param)
			_ = s.proc.Crash()
			s.proc = nil
			undos = append(undos, undo{time.Now().Add(act.param), func() {
				s.proc = s.a.Start()
				r.note("agent %d restarted, pid %d", i, s.proc.Pid())
			}, 0})
		case "kill-plugin", "pause-plugin":
			s, i := r.agents[act.target], act.target
			if s.proc == nil {
				continue
			}
			agentPID := s.proc.Pid()
			for _, pid := range findProcs(func(p procInfo) bool { return p.ppid == agentPID && p.args[0] == binary }) {
				if act.kind == "kill-plugin" {
					r.note("kill -9 store plugin pid %d of agent %d", pid, i)
					_ = syscall.Kill(pid, syscall.SIGKILL)
					continue
				}
				r.note("SIGSTOP store plugin pid %d of agent %d for %s", pid, i, act.param)
				r.pause(pid, true)
				_ = syscall.Kill(pid, syscall.SIGSTOP)
				undos = append(undos, undo{time.Now().Add(act.param), func() {
					r.note("SIGCONT store plugin pid %d of agent %d", pid, i)
					_ = syscall.Kill(pid, syscall.SIGCONT)
					r.pause(pid, false)
				}, i + 1})
			}
		case "stop-claimer", "stop-claimer-and-release":
			w := workers[act.target]
			w.mu.Lock()
			cmd := w.claimer
			w.mu.Unlock()
			if cmd == nil {
				continue
			}
			pid := cmd.Process.Pid
			from := mono()
			r.note("SIGSTOP claimer pid %d (worker %d) for %s", pid, w.idx, act.param)
			r.pause(pid, true)
			_ = cmd.Process.Signal(syscall.SIGSTOP)
			undos = append(undos, undo{time.Now().Add(act.param), func() {
				r.mu.Lock()
				r.stopped[pid] = append(r.stopped[pid], interval{from, mono()})
				r.mu.Unlock()
				r.note("SIGCONT claimer pid %d (worker %d)", pid, w.idx)
				_ = cmd.Process.Signal(syscall.SIGCONT)
				r.pause(pid, false)
			}, 0})
			if act.kind == "stop-claimer-and-release" {
				if card := r.heldBy(w.agent, pid); card != "" {
					r.forceRelease(w.agent, card)
				}
			}
		case "force-release":
			i := r.up()
			if i < 0 {
				continue
			}
			ctx, cancel := opCtx()
			cards, err := r.client(i).ListCards(ctx, board.ListCardsParams{ClaimedOnly: true})
			cancel()
			if err != nil || len(cards) == 0 {
				continue
			}
			r.forceRelease(i, cards[act.target%len(cards)].ID)
		}
	}
	runUndos(true)
	// The stopped claimers are running again and every agent is up.
	r.note("faults over")
	t.Logf("faults over after %s", time.Since(begin).Round(time.Millisecond))

	// Recovery: no more cards and no more faults. The workers run on a
	// little longer, then stop taking cards; the claims they hold end on
	// their own. Within a few leases and reaper passes nothing may be left
	// stranded (DESIGN.md#never-stranded): no card claimed — every dead
	// holder's claim expired and ruled on — and no card free in a running
	// column that is not also a pool state.
	drain := time.Now().Add(2 * r.lease)
	for time.Now().Before(drain) {
		<-tick.C
	}
	stopWorkers()
	r.note("workers stopped")
	octx, cancelAll := context.WithTimeout(context.Background(), time.Minute)
	defer cancelAll()
	b, err := r.client(0).Board(octx)
	if err != nil {
		t.Fatalf("board: %v", err)
	}
	runningPool := b.IsPool(b.Running())
	bound := 6*r.lease + 6*reaperInterval + 20*time.Second
	deadline := time.Now().Add(bound)
	var settled bool
	var last []board.Card
	for time.Now().Before(deadline) {
		if last, settled = r.settled(runningPool); settled {
			break
		}
		<-tick.C
	}
	t.Logf("recovered after %s", time.Since(deadline.Add(-bound)).Round(time.Millisecond))
	if !settled {
		for _, c := range last {
			if stranded(c, runningPool) {
				t.Errorf("stranded after %s of recovery: card %s in %s, claim %q epoch %d lease until %s, last run %s",
					bound, c.ID, c.State, c.Claim, c.ClaimEpoch, c.ClaimLeaseUntil.Format(time.RFC3339Nano), c.LastRunID)
			}
		}
	}
	for i, s := range r.agents {
		st, err := r.client(i).Status(octx)
		if err != nil {
			t.Errorf("agent %d status: %v", i, err)
			continue
		}
		if len(st.Claims) != 0 {
			t.Errorf("agent %d still holds %d claims after recovery: %+v", i, len(st.Claims), st.Claims)
		}
		_ = s
	}
	for _, w := range workers {
		t.Logf("worker %d claim exits: %v", w.idx, w.exits)
	}
	r.check(workers)
	if t.Failed() || testing.Verbose() {
		r.mu.Lock()
		t.Logf("nemesis log (seed %d):\n%s", r.seed, strings.Join(r.log, "\n"))
		r.mu.Unlock()
	}
}

// topUp keeps a few cards in the pool for the workers.
func (r *rig) topUp() {
	i := r.up()
	if i < 0 {
		return
	}
	c := r.client(i)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ready, err := c.ListCards(ctx, board.ListCardsParams{State: board.StateReady})
	if err != nil {
		return
	}
	for n := len(ready); n < 4; n++ {
		id := fmt.Sprintf("c%03d", r.cards+1)
		if _, err := c.CreateCard(ctx, board.CreateCardParams{ID: id}); err != nil && !errors.Is(err, board.ErrAlreadyExists) {
			return
		}
		r.cards++
	}
}

// heldBy names the card the claimer pid holds, if any.
func (r *rig) heldBy(agent, pid int) string {
	ctx, cancel := opCtx()
	defer cancel()
	cards, err := r.client(agent).ListCards(ctx, board.ListCardsParams{ClaimedOnly: true})
	if err != nil {
		return ""
	}
	for _, c := range cards {
		if m, err := board.ParseMarker(c.Claim); err == nil && m.PID == pid {
			return c.ID
		}
	}
	return ""
}

// opCtx bounds one call of the nemesis to an agent: a fault (a stopped
// store plugin) may hold its answer up, and the schedule must go on — the
// SIGCONT that ends the pause is the schedule's own next step.
func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 3*time.Second)
}

// forceRelease is an operator's steal, through the CLI.
func (r *rig) forceRelease(agent int, card string) {
	a := r.agents[agent].a
	ctx, cancel := opCtx()
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "card", "release", card, "--force")
	cmd.Env, cmd.Dir = a.Environ(), a.Dir
	out, err := cmd.CombinedOutput()
	r.note("force-release %s through agent %d: %v %s", card, agent, err, strings.TrimSpace(string(out)))
}

// stranded reports whether c is claimed, or free in the running column
// while that column is no pool (the fleet's board).
func stranded(c board.Card, runningPool bool) bool {
	return c.Claimed() || c.State == board.StateInProgress && !runningPool
}

// settled reports whether no card is stranded.
func (r *rig) settled(runningPool bool) ([]board.Card, bool) {
	i := r.up()
	if i < 0 {
		return nil, false
	}
	ctx, cancel := opCtx()
	defer cancel()
	cards, err := r.client(i).ListCards(ctx, board.ListCardsParams{})
	if err != nil {
		return nil, false
	}
	for _, c := range cards {
		if stranded(c, runningPool) {
			return cards, false
		}
	}
	return cards, true
}

type procInfo struct {
	pid, ppid int
	args      []string
}

// findProcs lists the processes of this host that match. It reads /proc;
// only processes this test started (worker commands, store plugins of its
// agents) are matched by the callers.
func findProcs(match func(procInfo) bool) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Field 4 is the ppid; the command name (field 2) may hold spaces,
		// so count from its closing parenthesis.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		p := procInfo{pid: pid, ppid: ppid, args: strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")}
		if match(p) {
			out = append(out, pid)
		}
	}
	return out
}

// line is one line of a worker's history.
type line struct {
	kind, card, marker string
	epoch              int64
	pid                int
	at                 int64
	file               string
}

func readHistories(t *testing.T, workers []*workerLoop) []line {
	var out []line
	for _, w := range workers {
		f, err := os.Open(w.hist)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) != 6 {
				// A kill -9 can only cut a line short at the end of the
				// file: each line is one write(2).
				t.Errorf("%s: malformed history line %q", filepath.Base(w.hist), sc.Text())
				continue
			}
			epoch, _ := strconv.ParseInt(fs[2], 10, 64)
			pid, _ := strconv.Atoi(fs[4])
			at, _ := strconv.ParseInt(fs[5], 10, 64)
			out = append(out, line{kind: fs[0], card: fs[1], epoch: epoch, marker: fs[3], pid: pid, at: at, file: filepath.Base(w.hist)})
		}
		f.Close()
	}
	return out
}

// events reads the whole event log, once it holds every write made
// before the call. A store may show its log up to a horizon behind its
// clock (MongoDB's readers stop Options.EventLag behind the server's,
// DESIGN.md#event-log), so a grant made just before the workers stopped
// may not be readable yet. The barrier is a card created now: once its
// creation is in the log, the horizon has passed every earlier write.
func (r *rig) events() []board.Event {
	i := r.up()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := r.client(i)
	const barrier = "barrier"
	if _, err := c.CreateCard(ctx, board.CreateCardParams{ID: barrier}); err != nil {
		r.t.Fatalf("events: create the barrier card: %v", err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var out []board.Event
		var after int64
		for {
			evs, err := c.Events(ctx, after, 1000)
			if err != nil {
				r.t.Fatalf("events: %v", err)
			}
			if len(evs) == 0 {
				break
			}
			out = append(out, evs...)
			after = evs[len(evs)-1].Seq
		}
		for _, ev := range out {
			if ev.Card == barrier && ev.Type == board.EventCardCreated {
				return out
			}
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("events: the barrier card's creation is not in the log after a minute")
		case <-tick.C:
		}
	}
}

// check runs the safety checks over the history and the event log.
func (r *rig) check(workers []*workerLoop) {
	t := r.t
	evs := r.events()
	hist := readHistories(t, workers)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cards, err := r.client(r.up()).ListCards(ctx, board.ListCardsParams{})
	if err != nil {
		t.Fatal(err)
	}
	final := map[string]board.Card{}
	for _, c := range cards {
		final[c.ID] = c
	}
	t.Logf("history: %d events, %d worker lines, %d cards", len(evs), len(hist), len(cards))
	for _, v := range checkEvents(evs) {
		t.Error(v)
	}
	for _, v := range checkGrantsSurvive(hist, evs, final) {
		t.Error(v)
	}
	r.mu.Lock()
	stopped := r.stopped
	r.mu.Unlock()
	plain, paused := checkOverlap(hist, r.lease, stopped)
	for _, v := range plain {
		t.Error(v)
	}
	// A claimer that was stopped cannot kill its command; its supervisor
	// does, by the deadline the claimer last confirmed
	// (DESIGN.md#supervisor-deadline), so its overlaps count as any other.
	for _, v := range paused {
		t.Errorf("%s (its claimer was SIGSTOPped: the supervisor should have killed the command by the deadline)", v)
	}
}

// checkEvents replays the event log card by card:
//
//  1. every grant (claimed event) of a card has a higher epoch than the
//     one before it (DESIGN.md#epoch-monotone);
//  2. every owner write (state, last_run, awaiting_input, gave_up, and
//     the release) is made by the card's current holder at that point of
//     the log — the store refused every stale token (DESIGN.md#fence);
//  4. a run's verdict is final: after finished, failed or cancelled no
//     event changes the run's status.
//
// Events of one card (and of one run) are in the log in the order they
// were written, on both stores (DESIGN.md#twin-writes).
func checkEvents(evs []board.Event) []string {
	var out []string
	type holder struct {
		marker string
		epoch  int64
	}
	cur := map[string]holder{}
	lastEpoch := map[string]int64{}
	verdict := map[string]string{}
	for _, ev := range evs {
		switch ev.Type {
		case board.EventClaimed:
			if ev.Data.Epoch <= lastEpoch[ev.Card] {
				out = append(out, fmt.Sprintf("epoch not increasing: event %d grants %s to %s at epoch %d after epoch %d", ev.Seq, ev.Card, ev.Data.Marker, ev.Data.Epoch, lastEpoch[ev.Card]))
			}
			lastEpoch[ev.Card] = ev.Data.Epoch
			cur[ev.Card] = holder{ev.Data.Marker, ev.Data.Epoch}
		case board.EventReleased:
			if h := cur[ev.Card]; h.marker != ev.Data.Marker || h.epoch != ev.Data.Epoch {
				out = append(out, fmt.Sprintf("event %d releases %s's claim on %s at epoch %d, but the card is held by %q at epoch %d", ev.Seq, ev.Data.Marker, ev.Card, ev.Data.Epoch, h.marker, h.epoch))
			}
			delete(cur, ev.Card)
		case board.EventState, board.EventLastRun, board.EventAwaitingInput, board.EventGaveUp:
			if !isHolderMarker(ev.Actor) {
				continue // an operator's or a machine-reason write
			}
			if h := cur[ev.Card]; h.marker != ev.Actor {
				out = append(out, fmt.Sprintf("stale owner write accepted: event %d (%s on %s) by %s, but the card is held by %q at epoch %d", ev.Seq, ev.Type, ev.Card, ev.Actor, h.marker, h.epoch))
			}
		case board.EventRunUpdated:
			if v, ok := verdict[ev.Data.RunID]; ok && ev.Data.Status != v {
				out = append(out, fmt.Sprintf("verdict changed: run %s of %s was %s, event %d makes it %s", ev.Data.RunID, ev.Card, v, ev.Seq, ev.Data.Status))
			}
			switch board.RunStatus(ev.Data.Status) {
			case board.RunFinished, board.RunFailed, board.RunCancelled:
				verdict[ev.Data.RunID] = ev.Data.Status
			}
		}
	}
	return out
}

// isHolderMarker tells a claim's marker (a worker's or the watchdog's)
// from an operator ("uid:N") or a blank machine actor.
func isHolderMarker(actor string) bool {
	if board.IsRecoveryMarker(actor) {
		return true
	}
	_, err := board.ParseMarker(actor)
	return err == nil
}

// checkGrantsSurvive is check 6: every grant a worker was told of (the
// epoch its command ran under) is in the event log as a grant to that
// marker, and no card's final epoch is below it.
func checkGrantsSurvive(hist []line, evs []board.Event, final map[string]board.Card) []string {
	type grant struct {
		card, marker string
		epoch        int64
	}
	logged := map[grant]bool{}
	for _, ev := range evs {
		if ev.Type == board.EventClaimed {
			logged[grant{ev.Card, ev.Data.Marker, ev.Data.Epoch}] = true
		}
	}
	var out []string
	seen := map[grant]bool{}
	byEpoch := map[string]map[int64]string{}
	for _, l := range hist {
		g := grant{l.card, l.marker, l.epoch}
		if seen[g] {
			continue
		}
		seen[g] = true
		if !logged[g] {
			out = append(out, fmt.Sprintf("lost grant: %s worked on %s at epoch %d (%s), but the event log has no such grant", l.marker, l.card, l.epoch, l.file))
		}
		if c, ok := final[l.card]; !ok || c.ClaimEpoch < l.epoch {
			out = append(out, fmt.Sprintf("lost grant: %s worked on %s at epoch %d, the card's epoch is now %d", l.marker, l.card, l.epoch, final[l.card].ClaimEpoch))
		}
		if byEpoch[l.card] == nil {
			byEpoch[l.card] = map[int64]string{}
		}
		if other, ok := byEpoch[l.card][l.epoch]; ok && other != l.marker {
			out = append(out, fmt.Sprintf("one token, two holders: %s and %s both worked on %s at epoch %d", other, l.marker, l.card, l.epoch))
		}
		byEpoch[l.card][l.epoch] = l.marker
	}
	return out
}

// checkOverlap is check 3: no two holders work on one card at once,
// except that a superseded holder may work on until its trusted deadline
// (DESIGN.md#trusted-deadline). That deadline is at most one lease after
// the start of its last confirmed renewal, which started before the store
// granted the card to the next holder, which was before the next holder's
// command started: so a line of the older holder stamped more than one
// lease after the newer holder's start is work past its deadline.
//
// Violations by a holder whose claimer was SIGSTOPped during its hold are
// returned apart (paused): the claimer could not kill its command.
func checkOverlap(hist []line, lease time.Duration, stopped map[int][]interval) (plain, paused []string) {
	type hold struct {
		marker     string
		epoch      int64
		start      int64
		hasStart   bool
		first, end int64
		lines      []line
	}
	holds := map[string]map[int64]*hold{}
	for _, l := range hist {
		if holds[l.card] == nil {
			holds[l.card] = map[int64]*hold{}
		}
		h := holds[l.card][l.epoch]
		if h == nil {
			h = &hold{marker: l.marker, epoch: l.epoch, first: l.at}
			holds[l.card][l.epoch] = h
		}
		if l.kind == "start" && (!h.hasStart || l.at < h.start) {
			h.start, h.hasStart = l.at, true
		}
		h.first, h.end = min(h.first, l.at), max(h.end, l.at)
		h.lines = append(h.lines, l)
	}
	for card, byEpoch := range holds {
		var hs []*hold
		for _, h := range byEpoch {
			hs = append(hs, h)
		}
		slices.SortFunc(hs, func(a, b *hold) int { return int(a.epoch - b.epoch) })
		for i, older := range hs {
			for _, newer := range hs[i+1:] {
				begin := newer.first
				if newer.hasStart {
					begin = newer.start
				}
				if older.end <= begin+lease.Nanoseconds() {
					continue
				}
				var late int
				var lastLate int64
				for _, l := range older.lines {
					if l.at > begin+lease.Nanoseconds() {
						late++
						lastLate = max(lastLate, l.at)
					}
				}
				msg := fmt.Sprintf("overlap on %s: %s (epoch %d, worked %d..%d) still worked %.3fs after %s (epoch %d) started at %d, past any trusted deadline it could have (%d lines, last at %d)",
					card, older.marker, older.epoch, older.first, older.end, float64(lastLate-begin)/1e9, newer.marker, newer.epoch, begin, late, lastLate)
				pid := 0
				if m, err := board.ParseMarker(older.marker); err == nil {
					pid = m.PID
				}
				if wasStopped(stopped[pid], older.first, older.end) {
					paused = append(paused, msg+" — its claimer was SIGSTOPped during the hold")
				} else {
					plain = append(plain, msg)
				}
			}
		}
	}
	return plain, paused
}

func wasStopped(ivs []interval, from, to int64) bool {
	for _, iv := range ivs {
		if iv.from <= to && iv.to >= from {
			return true
		}
	}
	return false
}
