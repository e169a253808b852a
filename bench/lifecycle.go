package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// The card lifecycle: a card's whole life as a worker lives it — claimed,
// its run started, in the running column, the run's verdict, the card
// filed, the claim released — each variant on its own store, every write
// durable.

func lifeDrivers(pg *pgServer) []lifeDriver {
	ds := []lifeDriver{
		{name: "leasekeeper as shipped, Start + Finish", note: "2 requests: Start (claim, run, running column in one write), Finish (verdict, filing, release in one write); store in its go-plugin child", setup: setupLifeStartFinish(startPluginAgent)},
		{name: "leasekeeper as shipped, fine-grained verbs", note: "6 requests: claim, start run, move to in_progress, update run to finished, move to done, release; store in its go-plugin child", setup: setupLifeFine},
		{name: "leasekeeper over the socket, store in-process, Start + Finish", note: "the same 2 requests with the store in the agent's process", setup: setupLifeStartFinish(startAgent)},
		{name: "leasekeeper store in-process, Start + Finish", note: "boltstore.Store.Start and Finish called directly, no socket", setup: setupLifeStore},
		{name: "etcd two-txn lifecycle", note: "embedded etcd; start txn: claim key absent and card in the pool → claim key with the worker's session lease, state, run; finish txn fenced on the claim's create revision → run verdict, state, claim key deleted", setup: setupEtcdLifecycle},
		{name: "River on SQLite, defaults", note: "insert a job, no-op worker, wait for River's completed event; WAL, synchronous=FULL, one connection", setup: setupRiverSQLite(false)},
		{name: "River on SQLite, tuned", note: "JobCompleteTx in the worker's transaction, FetchCooldown 1 ms, FetchPollInterval 5 ms", setup: setupRiverSQLite(true)},
	}
	if pg != nil {
		ds = append(ds,
			lifeDriver{name: "River on PostgreSQL " + pg.version + ", defaults", note: "the same on a local PostgreSQL (Unix socket, fsync on, synchronous commit), riverpgxv5", setup: setupRiverPG(pg, false)},
			lifeDriver{name: "River on PostgreSQL " + pg.version + ", tuned", note: "JobCompleteTx, FetchCooldown 1 ms, FetchPollInterval 5 ms", setup: setupRiverPG(pg, true)},
		)
	}
	return ds
}

const (
	lifeShippedSF = 0
	lifeShippedFG = 1
	lifeSocketSF  = 2
	lifeStoreSF   = 3
	lifeEtcd      = 4
	lifeRiverDef  = 5
	lifeRiverTune = 6
	lifePGDef     = 7
	lifePGTune    = 8
)

func runLifecycle(ctx context.Context, cfg config, rep *report) error {
	sec := rep.section("7. Card lifecycle (durable)",
		`One lifecycle = a card's whole life: claimed, its run started, the card in the running column, the
run's verdict (finished), the card filed (done), the claim released. Every variant is durable (fsynced
commits) and runs on the same disk, interleaved within each repeat; each worker takes the next fresh
card (made beforehand, untimed) until the measurement's count is done, so every lifecycle creates a
run on a card never used before. Figures are lifecycles per second across all workers; each
measurement's count is sized from the variant's previous one to last about the -duration. The anchor is
leasekeeper as shipped with Start + Finish: >1 means the other variant is faster. River's cycle is a
producer per worker that inserts a job and waits until it is completed, with a worker that does nothing:
a job queue's equivalent of a card's life, and less work than the others (no card, no run record).
River's client is started before and stopped after each of its measurements (untimed), so its pollers
take no CPU from the variants measured beside it.`)
	var pg *pgServer
	switch bin := findPostgres(); {
	case cfg.smoke && !explicit(flag.CommandLine, "scenarios"):
		sec.notef("River on PostgreSQL: left out of smoke runs (starting a server takes seconds).")
	case bin == "":
		sec.notef("River on PostgreSQL: not measured, no PostgreSQL server binary on this machine (looked for /usr/lib/postgresql/*/bin/postgres).")
	default:
		var err error
		if pg, err = startPostgres(ctx, bin); err != nil {
			return fmt.Errorf("start PostgreSQL: %w", err)
		}
		defer pg.stop()
	}
	drivers := lifeDrivers(pg)
	for _, workers := range cfg.workers {
		cursors := make([]*lifeCursor, len(drivers))
		rates := make([]float64, len(drivers))
		for i, d := range drivers {
			v, err := d.setup(ctx, filepath.Join(cfg.tmp, fmt.Sprintf("life-w%d-%d", workers, i)), workers)
			if err != nil {
				return fmt.Errorf("%s: %w", d.name, err)
			}
			v.stop = sync.OnceFunc(v.stop)
			defer v.stop()
			cursors[i] = &lifeCursor{v: v}
			// Warm up, and learn the rate that sizes the first count.
			if rates[i], err = cursors[i].measureLives(ctx, workers, cfg.lifeMinPerWkr*workers); err != nil {
				return fmt.Errorf("%s warm-up: %w", d.name, err)
			}
		}
		rows := make([]*row, len(drivers))
		for i, d := range drivers {
			rows[i] = sec.add(fmt.Sprintf("%s, %d workers", d.name, workers), "lifecycles/s", nil)
			rows[i].note = d.note
			if i > 0 {
				rows[i].anchor = rows[0]
			}
		}
		for r := range cfg.repeat {
			for i, d := range drivers {
				stopProfile, err := startLifeProfile(cfg, i, r, workers)
				if err != nil {
					return err
				}
				v, err := cursors[i].measureLives(ctx, workers, livesFor(rates[i], cfg.duration, workers, cfg.lifeMinPerWkr))
				stopProfile()
				if err != nil {
					return fmt.Errorf("%s, %d workers: %w", d.name, workers, err)
				}
				rows[i].vals = append(rows[i].vals, v)
				rates[i] = v
			}
		}
		over := func(a, b *row) (float64, float64, float64) { return (&row{vals: a.vals, anchor: b}).ratio() }
		sf := rows[lifeShippedSF]
		judge := func(other int, want float64, what string) {
			m, lo, hi := over(sf, rows[other])
			measured := fmt.Sprintf("%s vs %s lifecycles/s = %s× (%s–%s)", num(sf.vals.median()), num(rows[other].vals.median()), num(m), num(lo), num(hi))
			target := fmt.Sprintf("as shipped, Start + Finish ≥ %s× %s, %d workers", num(want), what, workers)
			if workers == 8 {
				rep.goal("7. lifecycle", target, measured, m >= want)
			} else {
				sec.notef("%d workers (no goal): Start + Finish as shipped is %s× (%s–%s) of %s.", workers, num(m), num(lo), num(hi), what)
			}
		}
		judge(lifeEtcd, 1.5, "etcd's two-txn lifecycle")
		judge(lifeRiverTune, 5, "River tuned (SQLite)")
		if pg != nil {
			judge(lifePGTune, 5, "River tuned (PostgreSQL)")
		}
		for i, d := range drivers {
			v := cursors[i].v
			if v.walStats == nil {
				continue
			}
			v.stop()
			st, err := v.walStats()
			if err != nil {
				return fmt.Errorf("%s: log counters: %w", d.name, err)
			}
			sec.notef("%d workers, %s: %s over the variant's whole run (warm-up and card preparation included).", workers, d.name, perSync(st))
		}
		m, lo, hi := over(sf, rows[lifeShippedFG])
		sec.notef("%d workers: Start + Finish does %s× (%s–%s) the lifecycles of the fine-grained verbs, both as shipped.", workers, num(m), num(lo), num(hi))
		m, lo, hi = over(sf, rows[lifeSocketSF])
		sec.notef("%d workers: as shipped (store in its plugin child), Start + Finish delivers %s× (%s–%s) of the same over the socket with the store in-process.", workers, num(m), num(lo), num(hi))
	}
	if pg == nil && !(cfg.smoke && !explicit(flag.CommandLine, "scenarios")) {
		rep.skip("7. lifecycle", "as shipped, Start + Finish ≥ 5× River tuned (PostgreSQL), 8 workers", "no PostgreSQL server on this machine")
	}
	return nil
}

// startLifeProfile profiles the first repeat of the as-shipped Start +
// Finish lifecycle when -profile is given: this process (the agent's
// socket server and the workers' clients) and the store plugin child.
func startLifeProfile(cfg config, variant, repeat, workers int) (func(), error) {
	if cfg.profile == "" || variant != lifeShippedSF || repeat != 0 {
		return func() {}, nil
	}
	dir, err := filepath.Abs(cfg.profile)
	if err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("lifecycle-shipped-%dw.pprof", workers)))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	stopChild := profileStoreChildren(fmt.Sprintf("life-w%d-%d%c", workers, lifeShippedSF, filepath.Separator),
		filepath.Join(dir, fmt.Sprintf("lifecycle-shipped-%dw-plugin.pprof", workers)))
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		stopChild()
	}, nil
}

// --- leasekeeper ---

// lifeAgent is an agent (startAgent or startPluginAgent) whose cards are
// made through its store, with one worker Client per worker.
func lifeAgent(ctx context.Context, dir string, workers int, start func(context.Context, string, time.Duration) (*agent, error)) (*agent, []*client.Client, func(context.Context, int, int) error, error) {
	a, err := start(ctx, dir, benchLease)
	if err != nil {
		return nil, nil, nil, err
	}
	clients := make([]*client.Client, workers)
	for w := range clients {
		clients[w] = &client.Client{Socket: a.path}
	}
	prepare := func(ctx context.Context, from, n int) error {
		return prepareParallel(ctx, from, n, func(ctx context.Context, i int) error {
			_, err := a.store.CreateCard(ctx, board.CreateCardParams{ID: lifeCardID(i), State: board.StateReady})
			return err
		})
	}
	return a, clients, prepare, nil
}

func setupLifeStartFinish(start func(context.Context, string, time.Duration) (*agent, error)) func(context.Context, string, int) (*lifeVariant, error) {
	return func(ctx context.Context, dir string, workers int) (*lifeVariant, error) {
		a, clients, prepare, err := lifeAgent(ctx, dir, workers, start)
		if err != nil {
			return nil, err
		}
		life := func(ctx context.Context, w, i int) error {
			cl, err := clients[w].Start(ctx, lifeCardID(i), client.StartOptions{})
			if err != nil {
				return fmt.Errorf("start: %w", err)
			}
			if _, err := cl.Finish(ctx, client.Verdict{Status: board.RunFinished}); err != nil {
				return fmt.Errorf("finish: %w", err)
			}
			return nil
		}
		v := &lifeVariant{prepare: prepare, life: life, stop: a.stop, walStats: storeWALStats(a.store)}
		if _, ok := a.store.(*boltstore.Store); !ok {
			file := filepath.Join(dir, "board.db")
			v.walStats = func() (boltstore.Stats, error) { return readWALStats(file) }
		}
		return v, nil
	}
}

func setupLifeFine(ctx context.Context, dir string, workers int) (*lifeVariant, error) {
	a, clients, prepare, err := lifeAgent(ctx, dir, workers, startPluginAgent)
	if err != nil {
		return nil, err
	}
	finished := board.RunFinished
	life := func(ctx context.Context, w, i int) error {
		cl, err := clients[w].Claim(ctx, lifeCardID(i))
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		run, err := cl.StartRun(ctx, client.RunSpec{})
		if err != nil {
			return fmt.Errorf("start run: %w", err)
		}
		if _, err := cl.SetState(ctx, board.StateInProgress); err != nil {
			return fmt.Errorf("move to in_progress: %w", err)
		}
		if _, err := cl.UpdateRun(ctx, run.ID, apitype.UpdateRunRequest{Status: &finished}); err != nil {
			return fmt.Errorf("update run: %w", err)
		}
		if _, err := cl.SetState(ctx, board.StateDone, client.WithReason(board.ReasonRunFinished)); err != nil {
			return fmt.Errorf("file the card: %w", err)
		}
		if err := cl.Release(ctx); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		return nil
	}
	return &lifeVariant{prepare: prepare, life: life, stop: a.stop}, nil
}

func setupLifeStore(ctx context.Context, dir string, _ int) (*lifeVariant, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	st, err := boltstore.Open(filepath.Join(dir, "board.db"), boltstore.Options{})
	if err != nil {
		return nil, err
	}
	prepare := func(ctx context.Context, from, n int) error {
		return prepareParallel(ctx, from, n, func(ctx context.Context, i int) error {
			_, err := st.CreateCard(ctx, board.CreateCardParams{ID: lifeCardID(i), State: board.StateReady})
			return err
		})
	}
	life := func(ctx context.Context, w, i int) error {
		id := lifeCardID(i)
		s, err := st.Start(ctx, board.StartParams{
			Card: id, Marker: board.WorkerMarker("benchhost", 1000+w), Lease: benchLease,
			Run: board.Run{ID: id + "-1"},
		})
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		if _, err := st.Finish(ctx, board.FinishParams{Card: id, Token: s.Token, RunID: s.Run.ID, Status: board.RunFinished}); err != nil {
			return fmt.Errorf("finish: %w", err)
		}
		return nil
	}
	return &lifeVariant{prepare: prepare, life: life, stop: func() { st.Close() }, walStats: storeWALStats(st)}, nil
}
