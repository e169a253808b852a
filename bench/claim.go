package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// benchLease is the lease of every claim in the throughput runs (the
// product default).
const benchLease = 30 * time.Second

// cycleFunc runs one claim + release for worker w.
type cycleFunc func(ctx context.Context, w int) error

// driver is one way of claiming and releasing a card.
type driver struct {
	name  string
	note  string
	setup func(ctx context.Context, dir string, workers int) (cycleFunc, func(), error)
}

func cardID(w int) string { return "card-" + strconv.Itoa(w) }

func claimDrivers() []driver {
	return []driver{
		{name: "leasekeeper over the socket", note: "client → Unix socket → socketapi → bbolt store", setup: setupSocket},
		{name: "leasekeeper agent as shipped", note: "the same, with the store in its go-plugin child process (the agent's default)", setup: setupSocketPlugin},
		{name: "leasekeeper store in-process", note: "boltstore.Store, group commit", setup: setupInProcess},
		{name: "raw bbolt, db.Update per op", note: "the disk's limit for one durable RMW commit per op", setup: setupRawUpdate},
		{name: "raw bbolt, db.Batch", note: "bbolt's default 10 ms batch delay, for reference", setup: setupRawBatch},
		{name: "etcd Mutex Lock+Unlock", note: "embedded etcd, lease-backed concurrency.Mutex", setup: setupEtcdMutex},
		{name: "etcd get + CAS txn", note: "embedded etcd, claim = get + txn(mod_revision), release = txn", setup: setupEtcdTxn},
	}
}

// measure runs workers concurrently, each repeating cycle until d has
// passed, and returns completed cycles per second.
func measure(ctx context.Context, workers int, d time.Duration, cycle cycleFunc) (float64, error) {
	var (
		wg    sync.WaitGroup
		total atomic.Int64
		first atomic.Pointer[error]
	)
	start := time.Now()
	deadline := start.Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := int64(0)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if err := cycle(ctx, w); err != nil {
					err = fmt.Errorf("worker %d: %w", w, err)
					first.CompareAndSwap(nil, &err)
					break
				}
				n++
			}
			total.Add(n)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if p := first.Load(); p != nil {
		return 0, *p
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return float64(total.Load()) / elapsed.Seconds(), nil
}

func runClaim(ctx context.Context, cfg config, rep *report) error {
	sec := rep.section("1. Claim + release throughput (durable)",
		`One cycle = claim a free card + release it, two durable (fsynced) commits, each worker on its own card.
Figures are cycles per second across all workers. All variants run on the same disk, interleaved within
each repeat. The socket variant is the product path with the store in the agent's process: the
standard-library client (one Client per worker, as a worker process has), HTTP over a real Unix socket
with kernel peer credentials, the socketapi server, the heartbeat loop tracking the claim, and the bbolt
store's group commit. "As shipped" adds what the agent binary does by default: the store served by its
go-plugin child process, its calls crossing the gRPC boundary on one stream, many to a message.`)
	dir := filepath.Join(cfg.tmp, "claim")
	disk, err := fsyncRate(ctx, dir, cfg.duration)
	if err != nil {
		return err
	}
	sec.notef("Plain 4 KiB write + fdatasync on this disk, one writer: %s fsyncs/s (measured once before the runs).", num(disk))

	drivers := claimDrivers()
	for _, workers := range cfg.workers {
		cycles := make([]cycleFunc, len(drivers))
		for i, d := range drivers {
			c, stop, err := d.setup(ctx, filepath.Join(dir, fmt.Sprintf("w%d-%d", workers, i)), workers)
			if err != nil {
				return fmt.Errorf("%s: %w", d.name, err)
			}
			defer stop()
			cycles[i] = c
			// Warm up: connections, page cache, etcd's first lease grants.
			if _, err := measure(ctx, workers, min(cfg.duration/5, 200*time.Millisecond), c); err != nil {
				return fmt.Errorf("%s warm-up: %w", d.name, err)
			}
		}
		rows := make([]*row, len(drivers))
		rows[0] = sec.add(fmt.Sprintf("%s, %d workers", drivers[0].name, workers), "cycles/s", nil)
		for i := 1; i < len(drivers); i++ {
			rows[i] = sec.add(fmt.Sprintf("%s, %d workers", drivers[i].name, workers), "cycles/s", nil)
			rows[i].note = drivers[i].note
		}
		rows[0].note = drivers[0].note
		for r := range cfg.repeat {
			for i, d := range drivers {
				var prof *os.File
				if cfg.profile != "" && i == 0 && r == 0 {
					prof, err = os.Create(filepath.Join(cfg.profile, fmt.Sprintf("claim-socket-%dw.pprof", workers)))
					if err != nil {
						return err
					}
					if err := pprof.StartCPUProfile(prof); err != nil {
						return err
					}
				}
				v, err := measure(ctx, workers, cfg.duration, cycles[i])
				if prof != nil {
					pprof.StopCPUProfile()
					prof.Close()
				}
				if err != nil {
					return fmt.Errorf("%s, %d workers: %w", d.name, workers, err)
				}
				rows[i].vals = append(rows[i].vals, v)
			}
		}
		// Every figure is compared with the socket path, which is the
		// product: >1 means the other variant is faster.
		for i := 1; i < len(rows); i++ {
			rows[i].anchor = rows[0]
		}
		sock, shipped, inproc, rawUpd, etcdMutex := rows[0], rows[1], rows[2], rows[3], rows[5]
		// over is a's figures as a ratio to b's, repeat by repeat.
		over := func(a, b *row) (float64, float64, float64) {
			tmp := &row{vals: a.vals, anchor: b}
			return tmp.ratio()
		}
		sockOver := func(other *row) (float64, float64, float64) { return over(sock, other) }
		m, lo, hi := over(shipped, etcdMutex)
		measured := fmt.Sprintf("%s vs %s cycles/s = %s× (%s–%s)", num(shipped.vals.median()), num(etcdMutex.vals.median()), num(m), num(lo), num(hi))
		if workers == 8 {
			rep.goal("1. claim", "as shipped ≥ 1.5× etcd Mutex Lock+Unlock, 8 workers", measured, m >= 1.5)
		} else {
			sec.notef("%d workers (no goal): the agent as shipped does %s of etcd's Mutex Lock+Unlock.", workers, measured)
		}
		m, lo, hi = sockOver(rawUpd)
		rep.goal("1. claim", fmt.Sprintf("socket ≥ 0.5× raw bbolt db.Update, %d workers", workers),
			fmt.Sprintf("%s vs %s cycles/s = %s× (%s–%s)", num(sock.vals.median()), num(rawUpd.vals.median()), num(m), num(lo), num(hi)), m >= 0.5)
		m, lo, hi = sockOver(inproc)
		sec.notef("%d workers: the socket path delivers %s× (%s–%s) of the in-process store's throughput.", workers, num(m), num(lo), num(hi))
		m, lo, hi = over(shipped, etcdMutex)
		m2, lo2, hi2 := over(shipped, rawUpd)
		sec.notef("%d workers: the agent as shipped (store plugin) delivers %s× (%s–%s) of etcd's Mutex Lock+Unlock and %s× (%s–%s) of raw bbolt db.Update.", workers, num(m), num(lo), num(hi), num(m2), num(lo2), num(hi2))
	}
	return nil
}

// fsyncRate measures plain write + fdatasync on one file, the floor below
// every durable store on this disk.
func fsyncRate(ctx context.Context, dir string, d time.Duration) (float64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	f, err := os.Create(filepath.Join(dir, "fsync.probe"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 4096)
	n := 0
	start := time.Now()
	for time.Since(start) < d && ctx.Err() == nil {
		if _, err := f.WriteAt(buf, int64(n%64)*4096); err != nil {
			return 0, err
		}
		if err := fdatasync(f); err != nil {
			return 0, err
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), ctx.Err()
}

// --- leasekeeper over the socket ---

func setupSocket(ctx context.Context, dir string, workers int) (cycleFunc, func(), error) {
	return socketCycle(ctx, dir, workers, startAgent)
}

func setupSocketPlugin(ctx context.Context, dir string, workers int) (cycleFunc, func(), error) {
	return socketCycle(ctx, dir, workers, startPluginAgent)
}

func socketCycle(ctx context.Context, dir string, workers int, start func(context.Context, string, time.Duration) (*agent, error)) (cycleFunc, func(), error) {
	a, err := start(ctx, dir, benchLease)
	if err != nil {
		return nil, nil, err
	}
	for w := range workers {
		if _, err := a.store.CreateCard(ctx, board.CreateCardParams{ID: cardID(w)}); err != nil {
			a.stop()
			return nil, nil, err
		}
	}
	clients := make([]*client.Client, workers)
	for w := range clients {
		clients[w] = &client.Client{Socket: a.path}
	}
	cycle := func(ctx context.Context, w int) error {
		cl, err := clients[w].Claim(ctx, cardID(w))
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		if err := cl.Release(ctx); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		return nil
	}
	return cycle, a.stop, nil
}

// --- the same store in-process ---

func setupInProcess(ctx context.Context, dir string, workers int) (cycleFunc, func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	st, err := boltstore.Open(filepath.Join(dir, "board.db"), boltstore.Options{})
	if err != nil {
		return nil, nil, err
	}
	for w := range workers {
		if _, err := st.CreateCard(ctx, board.CreateCardParams{ID: cardID(w)}); err != nil {
			st.Close()
			return nil, nil, err
		}
	}
	cycle := func(ctx context.Context, w int) error {
		marker := board.WorkerMarker("benchhost", 1000+w)
		held, err := st.Claim(ctx, board.ClaimParams{Card: cardID(w), Marker: marker, Lease: benchLease})
		tok := held.Token()
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		if err := st.ReleaseOwned(ctx, board.OwnedParams{Card: cardID(w), Token: tok}); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		return nil
	}
	return cycle, func() { st.Close() }, nil
}

// --- raw bbolt ---

// rawCard is the least a claim must persist: the holder, the fence and the
// lease. Raw bbolt reads it, checks it and writes it back in one durable
// transaction: the same read-modify-write the store does, without the
// indexes, the event log and the API around it.
type rawCard struct {
	ID         string    `json:"id"`
	Claim      string    `json:"claim"`
	Epoch      int64     `json:"claim_epoch"`
	ClaimedAt  time.Time `json:"claimed_at"`
	LeaseUntil time.Time `json:"claim_lease_until"`
}

var (
	rawBucket   = []byte("cards")
	errRawTaken = errors.New("raw bbolt: card already claimed")
)

func setupRaw(dir string, workers int, batch bool) (cycleFunc, func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	db, err := bolt.Open(filepath.Join(dir, "raw.db"), 0o600, &bolt.Options{Timeout: 5 * time.Second, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return nil, nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(rawBucket)
		if err != nil {
			return err
		}
		for w := range workers {
			v, _ := json.Marshal(rawCard{ID: cardID(w)})
			if err := b.Put([]byte(cardID(w)), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	commit := db.Update
	if batch {
		commit = db.Batch
	}
	rmw := func(id string, fn func(c *rawCard) error) error {
		return commit(func(tx *bolt.Tx) error {
			b := tx.Bucket(rawBucket)
			var c rawCard
			if err := json.Unmarshal(b.Get([]byte(id)), &c); err != nil {
				return err
			}
			if err := fn(&c); err != nil {
				return err
			}
			v, err := json.Marshal(c)
			if err != nil {
				return err
			}
			return b.Put([]byte(id), v)
		})
	}
	cycle := func(_ context.Context, w int) error {
		id, marker := cardID(w), board.WorkerMarker("benchhost", 1000+w)
		var epoch int64
		err := rmw(id, func(c *rawCard) error {
			if c.Claim != "" {
				return errRawTaken
			}
			now := time.Now()
			c.Claim, c.Epoch, c.ClaimedAt, c.LeaseUntil = marker, c.Epoch+1, now, now.Add(benchLease)
			epoch = c.Epoch
			return nil
		})
		if err != nil {
			return err
		}
		return rmw(id, func(c *rawCard) error {
			if c.Claim != marker || c.Epoch != epoch {
				return fmt.Errorf("raw bbolt: release of a claim not held")
			}
			c.Claim, c.ClaimedAt, c.LeaseUntil = "", time.Time{}, time.Time{}
			return nil
		})
	}
	return cycle, func() { db.Close() }, nil
}

func setupRawUpdate(_ context.Context, dir string, workers int) (cycleFunc, func(), error) {
	return setupRaw(dir, workers, false)
}

func setupRawBatch(_ context.Context, dir string, workers int) (cycleFunc, func(), error) {
	return setupRaw(dir, workers, true)
}

// --- etcd ---

func setupEtcdMutex(ctx context.Context, dir string, workers int) (cycleFunc, func(), error) {
	p, err := startEtcd(ctx, dir)
	if err != nil {
		return nil, nil, err
	}
	// One lease-backed session per worker, as each worker process would
	// hold; the session's lease keeps the lock alive while it is held.
	sessions := make([]*concurrency.Session, workers)
	for w := range sessions {
		s, err := concurrency.NewSession(p.cl, concurrency.WithTTL(int(benchLease/time.Second)))
		if err != nil {
			p.stop()
			return nil, nil, err
		}
		sessions[w] = s
	}
	cycle := func(ctx context.Context, w int) error {
		m := concurrency.NewMutex(sessions[w], "/lk/cards/"+cardID(w))
		if err := m.Lock(ctx); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		if err := m.Unlock(ctx); err != nil {
			return fmt.Errorf("unlock: %w", err)
		}
		return nil
	}
	stop := func() {
		for _, s := range sessions {
			s.Close()
		}
		p.stop()
	}
	return cycle, stop, nil
}

func setupEtcdTxn(ctx context.Context, dir string, workers int) (cycleFunc, func(), error) {
	p, err := startEtcd(ctx, dir)
	if err != nil {
		return nil, nil, err
	}
	for w := range workers {
		v, _ := json.Marshal(rawCard{ID: cardID(w)})
		if _, err := p.cl.Put(ctx, "/lk/cards/"+cardID(w), string(v)); err != nil {
			p.stop()
			return nil, nil, err
		}
	}
	cas := func(ctx context.Context, key string, rev int64, c rawCard) (int64, error) {
		v, err := json.Marshal(c)
		if err != nil {
			return 0, err
		}
		resp, err := p.cl.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, string(v))).
			Commit()
		if err != nil {
			return 0, err
		}
		if !resp.Succeeded {
			return 0, errors.New("etcd: compare-and-swap lost")
		}
		return resp.Header.Revision, nil
	}
	cycle := func(ctx context.Context, w int) error {
		key, marker := "/lk/cards/"+cardID(w), board.WorkerMarker("benchhost", 1000+w)
		g, err := p.cl.Get(ctx, key)
		if err != nil {
			return err
		}
		if len(g.Kvs) != 1 {
			return fmt.Errorf("etcd: %s missing", key)
		}
		var c rawCard
		if err := json.Unmarshal(g.Kvs[0].Value, &c); err != nil {
			return err
		}
		if c.Claim != "" {
			return errRawTaken
		}
		now := time.Now()
		c.Claim, c.Epoch, c.ClaimedAt, c.LeaseUntil = marker, c.Epoch+1, now, now.Add(benchLease)
		rev, err := cas(ctx, key, g.Kvs[0].ModRevision, c)
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		c.Claim, c.ClaimedAt, c.LeaseUntil = "", time.Time{}, time.Time{}
		if _, err := cas(ctx, key, rev, c); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		return nil
	}
	return cycle, p.stop, nil
}
