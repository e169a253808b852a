package nemesis_test

// The crash test (docs/DESIGN.md#crash-test): kill -9 of the agent and of
// its bbolt store plugin under load, restart on the same board file, and
// check that nothing a worker was told had happened was lost.
//
// Replay a failing seed, or crash more often:
//
//	go test -race ./internal/nemesis/ -run CrashLoses -crash.seed=N -crash.kills=20

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

var (
	crashSeedFlag  = flag.Uint64("crash.seed", 0, "seed of the crash test's schedule and workers (0: time-based); a run prints its seed")
	crashKillsFlag = flag.Int("crash.kills", 0, "how many kill -9s the crash test makes (0: 10, 4 with -short)")
)

// The crash test's worker processes are this test binary run again with
// crashWorkerEnv set: each is a process of its own, so each has its own
// marker and the agent tells their claims apart (DESIGN.md#marker).
const (
	crashWorkerEnv  = "LEASEKEEPER_CRASHTEST_WORKER" // "<seed> <index> <history file>"
	crashWorkers    = 4
	crashLease      = 3 * time.Second
	crashReaperTick = time.Second
)

// ack is one acknowledged result, as a worker records it in its history
// file once the agent's answer is in hand: one line, one write(2).
type ack struct {
	Worker int    `json:"w"`
	Seq    int    `json:"seq"` // the worker's own order
	Kind   string `json:"k"`   // created, grant, started, finished, released
	Card   string `json:"card"`
	Marker string `json:"marker,omitempty"`
	Epoch  int64  `json:"epoch,omitempty"`
	// How is how a grant was asked for: claim, next, start, start-next.
	How string `json:"how,omitempty"`
	// Run, Status and State are a started run and the card's state as the
	// agent answered, or a finish's verdict and filing.
	Run    string          `json:"run,omitempty"`
	Status board.RunStatus `json:"status,omitempty"`
	State  string          `json:"state,omitempty"`
}

// crashWorkerMain is a worker process's life: it runs the workload until
// SIGTERM, then ends what it holds and exits.
func crashWorkerMain(spec string) int {
	fs := strings.SplitN(spec, " ", 3)
	if len(fs) != 3 {
		fmt.Fprintf(os.Stderr, "crash worker: bad %s %q\n", crashWorkerEnv, spec)
		return 2
	}
	seed, err1 := strconv.ParseUint(fs[0], 10, 64)
	idx, err2 := strconv.Atoi(fs[1])
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintf(os.Stderr, "crash worker: %v\n", err)
		return 2
	}
	f, err := os.OpenFile(fs[2], os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash worker:", err)
		return 2
	}
	defer f.Close()
	stop, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	w := &crashWorker{idx: idx, hist: f, stop: stop, rng: rand.New(rand.NewPCG(seed, 0x63726173680000+uint64(idx)))}
	for stop.Err() == nil {
		w.step()
	}
	fmt.Fprintf(os.Stderr, "crash worker %d: %d acknowledged, %d errors\n", idx, w.seq, w.errs)
	return 0
}

type crashWorker struct {
	idx     int
	hist    *os.File
	stop    context.Context
	rng     *rand.Rand
	c       client.Client
	seq     int
	errs    int
	own     []string // cards this worker created
	pending string   // a card whose creation was not acknowledged yet
	next    int
}

func (w *crashWorker) record(a ack) {
	w.seq++
	a.Worker, a.Seq = w.idx, w.seq
	b, err := json.Marshal(a)
	if err != nil {
		panic(err)
	}
	if _, err := w.hist.Write(append(b, '\n')); err != nil {
		panic(err)
	}
}

// failed notes an unacknowledged call and paces the retry: while the agent
// or its plugin is down every call fails at once. This is a worker's
// back-off, not the test waiting for a condition.
func (w *crashWorker) failed(what string, err error) {
	w.errs++
	if w.errs%50 == 1 {
		fmt.Fprintf(os.Stderr, "crash worker %d: %s: %v\n", w.idx, what, err)
	}
	select {
	case <-w.stop.Done():
	case <-time.After(time.Duration(20+w.rng.IntN(80)) * time.Millisecond):
	}
}

// call bounds one call to the agent. It is not tied to the stop signal: a
// worker told to stop finishes what it is doing.
func call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

func (w *crashWorker) step() {
	switch k := w.rng.IntN(100); {
	case k < 20 || len(w.own) < 2:
		w.create()
	case k < 45:
		w.claim()
	default:
		w.start()
	}
}

func (w *crashWorker) create() {
	if w.pending == "" {
		w.next++
		w.pending = fmt.Sprintf("w%d-%03d", w.idx, w.next)
	}
	ctx, cancel := call()
	defer cancel()
	_, err := w.c.CreateCard(ctx, board.CreateCardParams{ID: w.pending})
	// A retry of a creation whose answer was lost finds the card there:
	// that too is the agent saying the card exists.
	if err != nil && !errors.Is(err, board.ErrAlreadyExists) {
		w.failed("create "+w.pending, err)
		return
	}
	w.record(ack{Kind: "created", Card: w.pending})
	w.own = append(w.own, w.pending)
	w.pending = ""
}

// hold keeps a claim for a while, renewed by the agent's heartbeat, so
// crashes land while claims are held.
func (w *crashWorker) hold(cl *client.Claim) {
	select {
	case <-time.After(time.Duration(w.rng.IntN(800)) * time.Millisecond):
	case <-cl.Context().Done():
	case <-w.stop.Done():
	}
}

func (w *crashWorker) claim() {
	ctx, cancel := call()
	defer cancel()
	how := "next"
	var cl *client.Claim
	var err error
	if w.rng.IntN(2) == 0 {
		how = "claim"
		cl, err = w.c.Claim(ctx, w.own[w.rng.IntN(len(w.own))])
	} else {
		cl, err = w.c.ClaimNext(ctx)
	}
	if err != nil {
		w.failed(how, err)
		return
	}
	tok := cl.Token()
	w.record(ack{Kind: "grant", Card: cl.Card().ID, Marker: tok.Marker, Epoch: tok.Epoch, How: how})
	w.hold(cl)
	rctx, rcancel := call()
	defer rcancel()
	if err := cl.Release(rctx); err != nil {
		w.failed("release", err)
		return
	}
	w.record(ack{Kind: "released", Card: cl.Card().ID, Marker: tok.Marker, Epoch: tok.Epoch})
}

func (w *crashWorker) start() {
	ctx, cancel := call()
	defer cancel()
	how := "start-next"
	var cl *client.Claim
	var err error
	if w.rng.IntN(3) == 0 {
		how = "start"
		cl, err = w.c.Start(ctx, w.own[w.rng.IntN(len(w.own))], client.StartOptions{})
	} else {
		cl, err = w.c.StartNext(ctx, client.StartOptions{})
	}
	if err != nil {
		w.failed(how, err)
		return
	}
	tok, run, card := cl.Token(), cl.Run(), cl.Card()
	w.record(ack{Kind: "grant", Card: card.ID, Marker: tok.Marker, Epoch: tok.Epoch, How: how})
	w.record(ack{Kind: "started", Card: card.ID, Marker: tok.Marker, Epoch: tok.Epoch, Run: run.ID, Status: run.Status, State: card.State})
	w.hold(cl)
	v := client.Verdict{Status: board.RunFinished}
	switch k := w.rng.IntN(10); {
	case k < 2:
		v = client.Verdict{Status: board.RunFailed, FailureCode: "CRASHTEST"}
	case k < 5:
		v = client.Verdict{Status: board.RunFailedResumable, FailureCode: "CRASHTEST"}
	}
	fctx, fcancel := call()
	defer fcancel()
	resp, err := cl.Finish(fctx, v)
	if err != nil {
		w.failed("finish", err)
		return
	}
	w.record(ack{Kind: "finished", Card: card.ID, Marker: tok.Marker, Epoch: tok.Epoch, Run: resp.Run.ID, Status: resp.Run.Status, State: resp.Card.State})
}

// TestCrashLosesNoAcknowledgedWrite runs crashWorkers worker processes
// against one agent on a bbolt board while a seeded schedule kills the
// agent or its store plugin with SIGKILL; a killed agent is restarted on
// the same board file. At the end it checks every acknowledged result
// against the board (checkAcks), the event log (checkEventLog), a fresh
// claim of every card, the board file itself opened after a clean stop,
// the write-ahead log's directory and the agents' logs.
func TestCrashLosesNoAcknowledgedWrite(t *testing.T) {
	// Its agent, board file and workers are its own: it runs alongside
	// the nemesis's rigs (see TestNemesis).
	t.Parallel()
	seed := *crashSeedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	kills := *crashKillsFlag
	if kills == 0 {
		kills = 10
		if testing.Short() {
			kills = 4
		}
	}
	t.Logf("crash seed %d, %d kills (replay: -run CrashLoses -crash.seed=%d -crash.kills=%d)", seed, kills, seed, kills)
	defer func() {
		if t.Failed() {
			t.Logf("FAILED with crash seed %d (replay: -run CrashLoses -crash.seed=%d -crash.kills=%d)", seed, seed, kills)
		}
	}()
	a := agentproc.New(t, binary, fmt.Sprintf("lease: %s\nreaper: {enabled: true, interval: %s}\n", crashLease, crashReaperTick))
	a.StartBound = 90 * time.Second
	boardFile := filepath.Join(a.Dir, "board.db")
	proc := a.Start()
	runs := []*agentproc.Proc{proc}

	// The workers.
	histDir := t.TempDir()
	type workerProc struct {
		cmd  *exec.Cmd
		hist string
		out  *agentproc.Buffer
		done chan error
	}
	var workers []*workerProc
	for i := range crashWorkers {
		wp := &workerProc{hist: filepath.Join(histDir, fmt.Sprintf("worker%d.jsonl", i)), out: &agentproc.Buffer{}, done: make(chan error, 1)}
		wp.cmd = exec.Command(os.Args[0])
		wp.cmd.Env = a.Environ(fmt.Sprintf("%s=%d %d %s", crashWorkerEnv, seed, i, wp.hist))
		wp.cmd.Stdout, wp.cmd.Stderr = wp.out, wp.out
		if err := wp.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { wp.done <- wp.cmd.Wait() }()
		t.Cleanup(func() {
			_ = wp.cmd.Process.Kill()
			<-wp.done
		})
		workers = append(workers, wp)
	}

	// The schedule: a seeded pause, then kill -9 of the plugin or the
	// agent, then wait for the store to serve again.
	rng := rand.New(rand.NewPCG(seed, 0x6b696c6c))
	var notes []string
	note := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		notes = append(notes, s)
		t.Log(s)
	}
	begin := time.Now()
	for i := range kills {
		wait := time.Duration(1000+rng.IntN(2500)) * time.Millisecond
		agentKill := rng.IntN(100) < 55
		restartAfter := time.Duration(rng.IntN(1000)) * time.Millisecond
		<-time.After(wait)
		plugin := pluginPID(t, a, proc)
		if !agentKill {
			note("kill %d at %s: kill -9 store plugin pid %d of agent pid %d", i+1, time.Since(begin).Round(time.Millisecond), plugin, proc.Pid())
			if err := syscall.Kill(plugin, syscall.SIGKILL); err != nil {
				t.Fatalf("kill plugin %d: %v", plugin, err)
			}
			agentproc.WaitFor(t, 60*time.Second, "the agent to restart its store plugin", func() bool {
				select {
				case <-proc.Done():
					t.Fatalf("the agent exited when its plugin was killed:\n%s", proc.Log())
				default:
				}
				st, err := statusOf(a)
				return err == nil && st.Store.Reachable && st.Store.Plugin != nil && st.Store.Plugin.State == "up" && st.Store.Plugin.PID != plugin
			})
			continue
		}
		note("kill %d at %s: kill -9 agent pid %d (store plugin pid %d), restart after %s", i+1, time.Since(begin).Round(time.Millisecond), proc.Pid(), plugin, restartAfter)
		if err := proc.Crash(); err != nil {
			t.Fatalf("kill agent: %v", err)
		}
		// The plugin dies by its parent-death signal (DESIGN.md#parent-death);
		// until it has, it holds the board file's lock.
		agentproc.WaitFor(t, 30*time.Second, fmt.Sprintf("store plugin pid %d to die with its agent", plugin), func() bool { return gone(plugin) })
		<-time.After(restartAfter)
		proc = a.Start()
		runs = append(runs, proc)
	}
	<-time.After(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
	note("faults over after %s; stopping the workers", time.Since(begin).Round(time.Millisecond))

	// Stop the workers: each ends what it holds (release or finish) and
	// exits.
	for _, wp := range workers {
		_ = wp.cmd.Process.Signal(syscall.SIGTERM)
	}
	var acks []ack
	for i, wp := range workers {
		select {
		case err := <-wp.done:
			if err != nil {
				t.Errorf("worker %d: %v\n%s", i, err, wp.out.String())
			}
			wp.done <- err // for the cleanup
		case <-time.After(60 * time.Second):
			t.Fatalf("worker %d did not stop within 60s of SIGTERM:\n%s", i, wp.out.String())
		}
		if testing.Verbose() {
			t.Logf("worker %d:\n%s", i, wp.out.String())
		} else {
			t.Logf("worker %d: %s", i, strings.TrimSpace(lastLines(wp.out.String(), 1)))
		}
		acks = append(acks, readAcks(t, wp.hist)...)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := &client.Client{Socket: a.Socket}
	// Claims left behind by a crash (a grant whose answer was lost, a
	// holder's hand-back that found no agent) end by their lease and the
	// reaper; the checks want a board at rest.
	bound := 6*crashLease + 6*crashReaperTick + 30*time.Second
	agentproc.WaitFor(t, bound, "no card left claimed", func() bool {
		held, err := c.ListCards(ctx, board.ListCardsParams{ClaimedOnly: true})
		return err == nil && len(held) == 0
	})
	cards, err := c.ListCards(ctx, board.ListCardsParams{})
	if err != nil {
		t.Fatal(err)
	}
	final := map[string]board.Card{}
	for _, cd := range cards {
		final[cd.ID] = cd
	}
	runsByID := map[string]board.Run{}
	for _, ak := range acks {
		if ak.Run == "" {
			continue
		}
		if _, ok := runsByID[ak.Run]; ok {
			continue
		}
		run, err := c.GetRun(ctx, ak.Run)
		if err != nil {
			t.Errorf("acknowledged run %s of %s (%s): %v", ak.Run, ak.Card, ak.Kind, err)
			continue
		}
		runsByID[ak.Run] = run
	}
	evs := allEvents(t, ctx, c)
	counts := map[string]int{}
	for _, ak := range acks {
		counts[ak.Kind]++
	}
	t.Logf("%d acknowledged results %v, %d cards, %d events, %d agent runs", len(acks), counts, len(cards), len(evs), len(runs))
	if counts["finished"] == 0 || counts["released"] == 0 || counts["created"] == 0 {
		t.Errorf("the workload acknowledged too little to check anything: %v", counts)
	}
	for _, v := range checkAcks(acks, final, runsByID) {
		t.Error(v)
	}
	for _, v := range checkEventLog(acks, evs) {
		t.Error(v)
	}

	// A fresh claim of every card the workers touched is granted an epoch
	// above every epoch they were told of (DESIGN.md#epoch-monotone). A
	// card whose run the crashes orphaned backs off before its next
	// attempt (DESIGN.md#retries): the claim waits that out.
	maxEpoch := map[string]int64{}
	for _, ak := range acks {
		maxEpoch[ak.Card] = max(maxEpoch[ak.Card], ak.Epoch)
	}
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range maxEpoch {
			if !yield(id) {
				return
			}
		}
	}) {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		cl, err := c.ClaimWait(wctx, id)
		cancel()
		if err != nil {
			t.Errorf("fresh claim of %s: %v", id, err)
			continue
		}
		if got := cl.Token().Epoch; got <= maxEpoch[id] {
			t.Errorf("epoch reissued: a fresh claim of %s after the crashes got epoch %d, but a worker was granted epoch %d", id, got, maxEpoch[id])
		}
		if err := cl.Release(ctx); err != nil {
			t.Errorf("release %s: %v", id, err)
		}
	}

	// What the last agent answered is what its board file holds: stop it
	// cleanly and read the file with the store itself.
	cards, err = c.ListCards(ctx, board.ListCardsParams{})
	if err != nil {
		t.Fatal(err)
	}
	evs = allEvents(t, ctx, c)
	a.Stop()
	if info, err := os.Stat(boardFile + ".wal"); err != nil || !info.IsDir() {
		t.Errorf("the write-ahead log's directory beside the board file: %v", err)
	} else if ents, err := os.ReadDir(boardFile + ".wal"); err != nil || len(ents) == 0 {
		t.Errorf("the write-ahead log's directory %s is empty (%v)", filepath.Base(boardFile)+".wal", err)
	}
	checkBoardFile(t, ctx, boardFile, cards, evs)

	// Nothing alarming in any agent's log.
	for i, r := range runs {
		if testing.Verbose() {
			for _, l := range strings.Split(r.Log(), "\n") {
				if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
					t.Logf("agent run %d: %s", i, l)
				}
			}
		}
		for _, v := range alarming(r.Log()) {
			t.Errorf("agent run %d (pid %d) logged: %s", i, r.Pid(), v)
		}
	}
	if t.Failed() {
		t.Logf("crash schedule (seed %d):\n%s", seed, strings.Join(notes, "\n"))
	}
}

// statusOf reads the agent's status through the client: the CLI's
// MustRun fails the test, and a status read races a restarting plugin.
func statusOf(a *agentproc.Agent) (st struct {
	Store struct {
		Reachable bool `json:"reachable"`
		Plugin    *struct {
			State string `json:"state"`
			PID   int    `json:"pid"`
		} `json:"plugin"`
	} `json:"store"`
}, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s, err := (&client.Client{Socket: a.Socket}).Status(ctx)
	if err != nil {
		return st, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// pluginPID is the pid of the agent's store plugin as its status names it,
// checked against /proc to be a child of the agent.
func pluginPID(t *testing.T, a *agentproc.Agent, p *agentproc.Proc) int {
	t.Helper()
	var pid int
	agentproc.WaitFor(t, 60*time.Second, "the agent's store plugin to be up", func() bool {
		st, err := statusOf(a)
		if err != nil || st.Store.Plugin == nil || st.Store.Plugin.State != "up" {
			return false
		}
		pid = st.Store.Plugin.PID
		return parentOf(pid) == p.Pid()
	})
	return pid
}

// parentOf reads pid's parent from /proc (0 when pid is gone).
func parentOf(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// gone reports whether pid has exited (gone, or a zombie not reaped yet).
func gone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

func readAcks(t *testing.T, path string) []ack {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []ack
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var a ack
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Errorf("%s: %v: %q", filepath.Base(path), err, sc.Text())
			continue
		}
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func allEvents(t *testing.T, ctx context.Context, c *client.Client) []board.Event {
	t.Helper()
	var out []board.Event
	var after int64
	for {
		evs, err := c.Events(ctx, after, 1000)
		if err != nil {
			t.Fatalf("events: %v", err)
		}
		if len(evs) == 0 {
			return out
		}
		out = append(out, evs...)
		after = evs[len(evs)-1].Seq
	}
}

// checkAcks checks the board after the crashes against what the workers
// were told. Writes to one card are ordered by its epoch — every grant
// raises it and the fence keeps each epoch's writes to its holder — so
// "the last write to a card" is the one at its highest epoch, whatever the
// workers' clocks say:
//
//   - every acknowledged card exists;
//   - no card's epoch is below an epoch a worker was granted;
//   - an acknowledged run exists, and a finished or failed verdict is
//     final: the run still has it (DESIGN.md#verdict-provenance);
//   - when no grant came after an acknowledged finish (the card's epoch is
//     still the finish's), the card is where the finish filed it, and the
//     run's verdict and the card's last run are the acknowledged ones.
//
// (A lost release cannot show on the card: its holder's claim ends by its
// lease and the reaper at a higher epoch. checkEventLog looks for it.)
//
// A call that failed is unacknowledged: it may or may not have landed, and
// the only trace it leaves is a higher epoch, which these rules allow.
func checkAcks(acks []ack, final map[string]board.Card, runs map[string]board.Run) []string {
	var out []string
	lastFinish := map[string]ack{} // card -> acknowledged finish at the highest epoch
	for _, a := range acks {
		c, ok := final[a.Card]
		if !ok {
			out = append(out, fmt.Sprintf("lost card: worker %d was told %s was %s (ack %d), but the board has no such card", a.Worker, a.Card, a.Kind, a.Seq))
			continue
		}
		if c.ClaimEpoch < a.Epoch {
			out = append(out, fmt.Sprintf("lost grant: worker %d was told of %s at epoch %d (%s %s, ack %d), but the card's epoch is %d", a.Worker, a.Card, a.Epoch, a.Kind, a.How, a.Seq, c.ClaimEpoch))
		}
		if a.Run != "" {
			run, ok := runs[a.Run]
			switch {
			case !ok:
				// GetRun failed; reported where it was read.
			case run.Card != a.Card:
				out = append(out, fmt.Sprintf("run %s belongs to %s, but worker %d was told it was %s's", a.Run, run.Card, a.Worker, a.Card))
			case a.Kind == "finished" && (a.Status == board.RunFinished || a.Status == board.RunFailed) && run.Status != a.Status:
				out = append(out, fmt.Sprintf("lost verdict: worker %d filed run %s of %s as %s at epoch %d (ack %d), but the run is %s", a.Worker, a.Run, a.Card, a.Status, a.Epoch, a.Seq, run.Status))
			}
		}
		if a.Kind == "finished" {
			if prev, ok := lastFinish[a.Card]; !ok || a.Epoch >= prev.Epoch {
				lastFinish[a.Card] = a
			}
		}
	}
	for id, a := range lastFinish {
		c := final[id]
		if c.ClaimEpoch != a.Epoch {
			continue // a later grant, acknowledged or not, may have changed it
		}
		if c.State != a.State {
			out = append(out, fmt.Sprintf("lost filing: worker %d finished %s at epoch %d into %s (ack %d), no grant came after, but the card is in %s", a.Worker, id, a.Epoch, a.State, a.Seq, c.State))
		}
		if run, ok := runs[a.Run]; ok && run.Status != a.Status {
			out = append(out, fmt.Sprintf("lost verdict: worker %d finished run %s of %s as %s at epoch %d (ack %d), no grant came after, but the run is %s", a.Worker, a.Run, id, a.Status, a.Epoch, a.Seq, run.Status))
		}
		if c.LastRunID != a.Run {
			out = append(out, fmt.Sprintf("lost run: worker %d finished run %s of %s at epoch %d (ack %d), no grant came after, but the card's last run is %q", a.Worker, a.Run, id, a.Epoch, a.Seq, c.LastRunID))
		}
	}
	slices.Sort(out)
	return out
}

// checkEventLog checks the audit log: sequence numbers strictly increase
// (so none repeats); every acknowledged creation, grant, run start,
// release and finish (its verdict and its release) is in it; and every
// grant of a card has a higher epoch than the one before.
func checkEventLog(acks []ack, evs []board.Event) []string {
	var out []string
	type grant struct {
		card, marker string
		epoch        int64
	}
	created := map[string]bool{}
	granted := map[grant]bool{}
	released := map[grant]bool{}
	runEvent := map[string]bool{}   // run id -> some event names it
	verdict := map[[2]string]bool{} // run id, status -> a run_updated event set it
	lastEpoch := map[string]int64{}
	var prev int64
	for i, ev := range evs {
		if i > 0 && ev.Seq <= prev {
			out = append(out, fmt.Sprintf("event sequence not strictly increasing: event %d follows event %d", ev.Seq, prev))
		}
		prev = ev.Seq
		switch ev.Type {
		case board.EventCardCreated:
			if created[ev.Card] {
				out = append(out, fmt.Sprintf("card %s created twice (event %d)", ev.Card, ev.Seq))
			}
			created[ev.Card] = true
		case board.EventClaimed:
			if ev.Data.Epoch <= lastEpoch[ev.Card] {
				out = append(out, fmt.Sprintf("epoch not increasing: event %d grants %s at epoch %d after epoch %d", ev.Seq, ev.Card, ev.Data.Epoch, lastEpoch[ev.Card]))
			}
			lastEpoch[ev.Card] = ev.Data.Epoch
			granted[grant{ev.Card, ev.Data.Marker, ev.Data.Epoch}] = true
		case board.EventReleased:
			released[grant{ev.Card, ev.Data.Marker, ev.Data.Epoch}] = true
		case board.EventRunCreated, board.EventRunUpdated:
			runEvent[ev.Data.RunID] = true
			if ev.Type == board.EventRunUpdated {
				verdict[[2]string{ev.Data.RunID, ev.Data.Status}] = true
			}
		}
	}
	for _, a := range acks {
		switch a.Kind {
		case "created":
			if !created[a.Card] {
				out = append(out, fmt.Sprintf("lost event: worker %d was told %s was created (ack %d), but the log has no card_created for it", a.Worker, a.Card, a.Seq))
			}
		case "grant":
			if !granted[grant{a.Card, a.Marker, a.Epoch}] {
				out = append(out, fmt.Sprintf("lost event: worker %d was granted %s at epoch %d as %s (ack %d), but the log has no such grant", a.Worker, a.Card, a.Epoch, a.Marker, a.Seq))
			}
		case "started":
			if !runEvent[a.Run] {
				out = append(out, fmt.Sprintf("lost event: worker %d started run %s of %s at epoch %d (ack %d), but the log never names the run", a.Worker, a.Run, a.Card, a.Epoch, a.Seq))
			}
		case "released", "finished":
			if !released[grant{a.Card, a.Marker, a.Epoch}] {
				out = append(out, fmt.Sprintf("lost event: worker %d was told its hold of %s at epoch %d ended (%s, ack %d), but the log has no release of it", a.Worker, a.Card, a.Epoch, a.Kind, a.Seq))
			}
			if a.Kind == "finished" && !verdict[[2]string{a.Run, string(a.Status)}] {
				out = append(out, fmt.Sprintf("lost event: worker %d finished run %s of %s as %s (ack %d), but the log has no such verdict", a.Worker, a.Run, a.Card, a.Status, a.Seq))
			}
		}
	}
	return out
}

// checkBoardFile opens the board file the last agent stopped cleanly with
// the bbolt store and compares it with what that agent answered last.
func checkBoardFile(t *testing.T, ctx context.Context, path string, cards []board.Card, evs []board.Event) {
	t.Helper()
	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Errorf("open the board file after a clean stop: %v", err)
		return
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Errorf("close the board file: %v", err)
		}
	}()
	got, err := s.ListCards(ctx, board.ListCardsParams{})
	if err != nil {
		t.Errorf("board file: list cards: %v", err)
		return
	}
	byID := map[string]board.Card{}
	for _, c := range got {
		byID[c.ID] = c
	}
	if len(got) != len(cards) {
		t.Errorf("the board file holds %d cards, the agent answered %d", len(got), len(cards))
	}
	for _, want := range cards {
		c, ok := byID[want.ID]
		switch {
		case !ok:
			t.Errorf("the board file lacks card %s", want.ID)
		case c.ClaimEpoch != want.ClaimEpoch || c.State != want.State || c.Claim != want.Claim || c.LastRunID != want.LastRunID:
			t.Errorf("the board file's %s is %s epoch %d claim %q run %s; the agent answered %s epoch %d claim %q run %s",
				want.ID, c.State, c.ClaimEpoch, c.Claim, c.LastRunID, want.State, want.ClaimEpoch, want.Claim, want.LastRunID)
		}
	}
	fileEvs, err := s.Events(ctx, board.EventsParams{After: 0, Limit: len(evs) + 10})
	if err != nil {
		t.Errorf("board file: events: %v", err)
		return
	}
	if len(fileEvs) != len(evs) || len(evs) > 0 && fileEvs[len(fileEvs)-1].Seq != evs[len(evs)-1].Seq {
		t.Errorf("the board file holds %d events, the agent answered %d", len(fileEvs), len(evs))
	}
}

// alarmingLine is what an agent's log must not say, crash or no crash: a
// damaged or refused write-ahead log, a store that stopped taking writes,
// a panic, a data race in the agent or its plugin.
var alarmingLine = regexp.MustCompile(`(?i)write-ahead|\bwal\b|damaged|corrupt|checksum|replay|panic|DATA RACE|fatal error|refus.*writes`)

// alarming lists an agent run's log lines worth failing for: any line
// alarmingLine matches, and any error logged while the agent opened its
// store (before it was ready), which is where a reopen after a crash would
// complain.
func alarming(log string) []string {
	var out []string
	ready := false
	for _, l := range strings.Split(log, "\n") {
		switch {
		case alarmingLine.MatchString(l):
			out = append(out, l)
		case !ready && strings.Contains(l, "level=ERROR"):
			out = append(out, l+" (while starting)")
		}
		if strings.Contains(l, `msg="agent ready"`) {
			ready = true
		}
	}
	return out
}
