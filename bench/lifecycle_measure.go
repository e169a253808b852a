package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// lifeVariant is one way of living a card's whole life (claim, run,
// verdict, filing, release), set up and ready to measure.
type lifeVariant struct {
	// prepare makes lifecycles [from, from+n) possible: the cards (or
	// whatever the variant needs before a lifecycle starts) exist. It is
	// not timed.
	prepare func(ctx context.Context, from, n int) error
	// life runs lifecycle i (its own card, never used again) as worker w.
	life func(ctx context.Context, w, i int) error
	// resume and pause, when set, bracket each measurement (untimed): a
	// variant with background work of its own (River's pollers and
	// maintenance) runs it only while it is measured, not while the
	// variants beside it are.
	resume, pause func(ctx context.Context) error
	stop          func()
	// walStats, when set, reads the bbolt store's log counters; it is
	// called after stop (a plugin child leaves them when it exits).
	walStats func() (boltstore.Stats, error)
}

// lifeDriver sets a variant up on its own store.
type lifeDriver struct {
	name  string
	note  string
	setup func(ctx context.Context, dir string, workers int) (*lifeVariant, error)
}

func lifeCardID(i int) string { return "life-" + strconv.Itoa(i) }

// lifeCursor hands out lifecycle numbers to one variant: every card is
// used once, so each measurement prepares the cards it will use first.
type lifeCursor struct {
	v    *lifeVariant
	next int
}

// measureLives prepares n lifecycles, then runs them with workers
// concurrent workers taking the next one until none is left, and returns
// lifecycles per second of the timed part. A fixed count rather than a
// fixed time, because each lifecycle consumes a card made beforehand;
// the last lifecycles overlap less, which costs at most one lifecycle
// per worker of concurrency at the end.
func (c *lifeCursor) measureLives(ctx context.Context, workers, n int) (float64, error) {
	from := c.next
	if err := c.v.prepare(ctx, from, n); err != nil {
		return 0, fmt.Errorf("prepare: %w", err)
	}
	c.next += n
	if c.v.resume != nil {
		if err := c.v.resume(ctx); err != nil {
			return 0, fmt.Errorf("resume: %w", err)
		}
		defer func() {
			if c.v.pause != nil {
				_ = c.v.pause(context.WithoutCancel(ctx))
			}
		}()
	}
	var (
		wg    sync.WaitGroup
		taken atomic.Int64
		first atomic.Pointer[error]
	)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && first.Load() == nil {
				i := int(taken.Add(1) - 1)
				if i >= n {
					return
				}
				if err := c.v.life(ctx, w, from+i); err != nil {
					err = fmt.Errorf("worker %d, lifecycle %d: %w", w, from+i, err)
					first.CompareAndSwap(nil, &err)
					return
				}
			}
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
	return float64(n) / elapsed.Seconds(), nil
}

// livesFor is how many lifecycles fill about d at rate (lifecycles/s),
// at least perWorker per worker.
func livesFor(rate float64, d time.Duration, workers, perWorker int) int {
	n := int(rate * d.Seconds())
	return max(n, perWorker*workers)
}

// prepareParallel runs make for every i in [from, from+n) on a few
// goroutines: cards are made the way the store makes them fastest, many
// in flight at once.
func prepareParallel(ctx context.Context, from, n int, mk func(ctx context.Context, i int) error) error {
	const par = 32
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		first atomic.Pointer[error]
	)
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first.Load() == nil && ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := mk(ctx, from+i); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return ctx.Err()
}
