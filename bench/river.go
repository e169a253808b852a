package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite" // the pure-Go SQLite database/sql driver "sqlite"
)

// River (the Go job queue) as a user would run it for the same work: one
// job per card, a no-op worker, and a producer per worker that inserts a
// job and waits until it is completed — a latency-bound cycle, as a
// leasekeeper worker's Start ... Finish is.
//
// Two configurations of each database:
//   - defaults: River as it comes; the worker returns nil and River's
//     batch completer records the completion (it flushes every 250 ms,
//     sooner only when 100 completions are waiting; River has no setting
//     for either), and the producer learns of it from River's
//     job-completed event subscription;
//   - tuned: the worker completes its job in its own transaction with
//     river.JobCompleteTx and tells the producer once that transaction has
//     committed (the completion is durable then), and fetching is made
//     eager: FetchCooldown at its minimum (1 ms) and FetchPollInterval
//     5 ms (defaults 100 ms and 1 s).

// riverArgs is the job: the lifecycle number it stands for.
type riverArgs struct {
	Seq int `json:"seq"`
}

func (riverArgs) Kind() string { return "bench_lifecycle" }

// riverDone hands a completion from whoever learns of it to the producer
// waiting for that job; either side may come first.
type riverDone struct {
	mu sync.Mutex
	m  map[int64]chan struct{}
}

func (d *riverDone) ch(id int64) chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[int64]chan struct{}{}
	}
	c, ok := d.m[id]
	if !ok {
		c = make(chan struct{})
		d.m[id] = c
	}
	return c
}

func (d *riverDone) complete(id int64) {
	c := d.ch(id)
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-c: // told twice
	default:
		close(c)
	}
}

func (d *riverDone) wait(ctx context.Context, id int64) error {
	c := d.ch(id)
	select {
	case <-c:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return fmt.Errorf("river: job %d not completed after 30s", id)
	}
	d.mu.Lock()
	delete(d.m, id)
	d.mu.Unlock()
	return nil
}

// riverNoop is the defaults' worker: it does nothing and returns nil.
type riverNoop struct {
	river.WorkerDefaults[riverArgs]
}

func (riverNoop) Work(context.Context, *river.Job[riverArgs]) error { return nil }

// riverTunedSQLite completes its job within its own transaction.
type riverTunedSQLite struct {
	river.WorkerDefaults[riverArgs]
	db   *sql.DB
	done *riverDone
}

func (w *riverTunedSQLite) Work(ctx context.Context, job *river.Job[riverArgs]) error {
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := river.JobCompleteTx[*riversqlite.Driver](ctx, tx, job); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	w.done.complete(job.ID)
	return nil
}

// riverTunedPG is riverTunedSQLite on PostgreSQL.
type riverTunedPG struct {
	river.WorkerDefaults[riverArgs]
	pool *pgxpool.Pool
	done *riverDone
}

func (w *riverTunedPG) Work(ctx context.Context, job *river.Job[riverArgs]) error {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	w.done.complete(job.ID)
	return nil
}

const (
	riverTunedCooldown = river.FetchCooldownMin
	riverTunedPoll     = 5 * time.Millisecond
)

func riverConfig(workers int, w *river.Workers, tuned bool) *river.Config {
	cfg := &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers: w,
		Logger:  slog.New(slog.DiscardHandler),
	}
	if tuned {
		cfg.FetchCooldown, cfg.FetchPollInterval = riverTunedCooldown, riverTunedPoll
	}
	return cfg
}

// riverVariant wires the producer's cycle around client; with
// subscribe the completions come from River's event subscription.
func riverVariant[TTx any](ctx context.Context, cl *river.Client[TTx], done *riverDone, subscribe bool, closeDB func()) (*lifeVariant, error) {
	life := func(ctx context.Context, _, i int) error {
		res, err := cl.Insert(ctx, riverArgs{Seq: i}, nil)
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		return done.wait(ctx, res.Job.ID)
	}
	// The client runs only while its variant is measured: started, its
	// producers and maintenance poll the database every few milliseconds,
	// which would take CPU from the variants measured beside it.
	// River closes its subscriptions when the client stops, so each run
	// of the client subscribes anew.
	var unsubscribe func()
	resume := func(ctx context.Context) error {
		if subscribe {
			events, cancel := cl.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: 100_000})
			unsubscribe = cancel
			go func() {
				for ev := range events {
					if ev.Job != nil {
						done.complete(ev.Job.ID)
					}
				}
			}()
		}
		if err := cl.Start(ctx); err != nil {
			return fmt.Errorf("start river client: %w", err)
		}
		return nil
	}
	pause := func(ctx context.Context) error {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := cl.Stop(sctx)
		if unsubscribe != nil {
			unsubscribe()
			unsubscribe = nil
		}
		return err
	}
	nothing := func(context.Context, int, int) error { return nil }
	return &lifeVariant{prepare: nothing, life: life, resume: resume, pause: pause, stop: closeDB}, nil
}

func migrateRiver[TTx any](ctx context.Context, d riverdriver.Driver[TTx]) error {
	m, err := rivermigrate.New(d, &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// openRiverSQLite opens the database file durable: WAL with
// synchronous=FULL (every commit fsyncs the WAL), one connection as
// River's SQLite driver recommends.
func openRiverSQLite(dir string) (*sql.DB, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	dsn := "file:" + filepath.Join(dir, "river.db") +
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	var sync int
	if err := db.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil {
		db.Close()
		return nil, err
	}
	if sync != 2 {
		db.Close()
		return nil, fmt.Errorf("sqlite: synchronous is %d, not FULL (2)", sync)
	}
	return db, nil
}

func setupRiverSQLite(tuned bool) func(ctx context.Context, dir string, workers int) (*lifeVariant, error) {
	return func(ctx context.Context, dir string, workers int) (*lifeVariant, error) {
		db, err := openRiverSQLite(dir)
		if err != nil {
			return nil, err
		}
		drv := riversqlite.New(db)
		if err := migrateRiver(ctx, drv); err != nil {
			db.Close()
			return nil, fmt.Errorf("river migrate (sqlite): %w", err)
		}
		done := &riverDone{}
		ws := river.NewWorkers()
		if tuned {
			river.AddWorker(ws, &riverTunedSQLite{db: db, done: done})
		} else {
			river.AddWorker[riverArgs](ws, riverNoop{})
		}
		cl, err := river.NewClient(drv, riverConfig(workers, ws, tuned))
		if err != nil {
			db.Close()
			return nil, err
		}
		return riverVariant(ctx, cl, done, !tuned, func() { db.Close() })
	}
}

// setupRiverPG runs River on its own database of the temporary PostgreSQL
// server, durable as PostgreSQL is by default (fsync on, synchronous
// commit).
func setupRiverPG(pg *pgServer, tuned bool) func(ctx context.Context, dir string, workers int) (*lifeVariant, error) {
	return func(ctx context.Context, dir string, workers int) (*lifeVariant, error) {
		if pg == nil {
			return nil, errors.New("no PostgreSQL server")
		}
		dbName := pg.newDBName()
		if err := pg.createDB(ctx, dbName); err != nil {
			return nil, err
		}
		pool, err := pgxpool.New(ctx, pg.dsn(dbName))
		if err != nil {
			return nil, err
		}
		drv := riverpgxv5.New(pool)
		if err := migrateRiver(ctx, drv); err != nil {
			pool.Close()
			return nil, fmt.Errorf("river migrate (postgres): %w", err)
		}
		done := &riverDone{}
		ws := river.NewWorkers()
		if tuned {
			river.AddWorker(ws, &riverTunedPG{pool: pool, done: done})
		} else {
			river.AddWorker[riverArgs](ws, riverNoop{})
		}
		cl, err := river.NewClient[pgx.Tx](drv, riverConfig(workers, ws, tuned))
		if err != nil {
			pool.Close()
			return nil, err
		}
		return riverVariant(ctx, cl, done, !tuned, pool.Close)
	}
}
