package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// childFlag re-executes this binary as a bare agent-like process (a bbolt
// store and a heartbeat loop holding N claims, nothing else), so its
// resident memory is the heartbeat's and not the benchmark's, which also
// holds embedded etcd and other stores.
const childFlag = "-bench-child-heartbeat"

// heartbeatResult is what the child reports on stdout.
type heartbeatResult struct {
	Claims  int       `json:"claims"`
	TickMS  []float64 `json:"tick_ms"`
	CPUMS   []float64 `json:"cpu_ms"`
	RSS     int64     `json:"rss"`
	PeakRSS int64     `json:"peak_rss"`
	RSSAnon int64     `json:"rss_anon"`
	RSSFile int64     `json:"rss_file"`
	Setup   float64   `json:"setup_s"`
}

func runHeartbeat(ctx context.Context, cfg config, rep *report) error {
	sec := rep.section("2. Heartbeat at scale (30 s lease)",
		`One agent-like process (a bbolt store and the heartbeat loop, nothing else: a child process of the
benchmark, so its memory is its own) holds N claims of a live owner (the child itself, probed by pid and
start time). A tick is heartbeat.Loop.RunOnce: owner probes, ONE batched RenewClaims write (fsynced),
bookkeeping. CPU per tick is the process's user+system CPU time (getrusage) across the tick, so it
includes the garbage collector's share. CPU per minute is computed, not sampled over a minute: CPU per
tick × 3 ticks a minute (lease/3 cadence) ÷ 60 s. RSS is VmRSS after the ticks.`)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	ticks := cfg.repeat
	for _, n := range cfg.heartbeatClaims {
		args := []string{childFlag, "-n", strconv.Itoa(n), "-ticks", strconv.Itoa(ticks), "-dir", filepath.Join(cfg.tmp, "hb-"+strconv.Itoa(n))}
		if cfg.profile != "" {
			args = append(args, "-cpuprofile", filepath.Join(cfg.profile, fmt.Sprintf("heartbeat-tick-%d.pprof", n)))
		}
		cmd := exec.CommandContext(ctx, exe, args...)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("heartbeat child (%d claims): %w", n, err)
		}
		var res heartbeatResult
		if err := json.Unmarshal(out, &res); err != nil {
			return fmt.Errorf("heartbeat child output: %w", err)
		}
		tick := sec.add(fmt.Sprintf("tick duration, %d claims", n), "ms", nil)
		tick.vals = res.TickMS
		cpu := sec.add(fmt.Sprintf("CPU per tick, %d claims", n), "ms", nil)
		cpu.vals = res.CPUMS
		share := sec.add(fmt.Sprintf("CPU share of one core, %d claims", n), "%", nil)
		for _, c := range res.CPUMS {
			share.vals = append(share.vals, c*3/60_000*100)
		}
		rss := sec.add(fmt.Sprintf("RSS after the ticks, %d claims", n), "MiB", nil)
		rss.vals = sample{float64(res.RSS) / (1 << 20)}
		anon := sec.add(fmt.Sprintf("anonymous RSS after the ticks, %d claims", n), "MiB", nil)
		anon.vals = sample{float64(res.RSSAnon) / (1 << 20)}
		sec.notef("%d claims: setting them up (create + claim, durable) took %.1f s; peak RSS of the child during setup and ticks %.1f MiB; after the ticks %.1f MiB anonymous (Go heap, stacks) + %.1f MiB file-backed (the executable's code and the bbolt file's mmap, both reclaimable by the kernel).", n, res.Setup, float64(res.PeakRSS)/(1<<20), float64(res.RSSAnon)/(1<<20), float64(res.RSSFile)/(1<<20))
		if n == 10_000 || cfg.smoke {
			t, c, r := tick.vals.median(), share.vals.median(), anon.vals.median()
			rep.goal("2. heartbeat", fmt.Sprintf("%d-claim tick ≤ 50 ms", n), fmt.Sprintf("%s ms (%s–%s) = %s× the budget", num(t), num(tick.vals.min()), num(tick.vals.max()), num(t/50)), t <= 50)
			rep.goal("2. heartbeat", fmt.Sprintf("%d claims: ≤ 1%% of a core on average", n), fmt.Sprintf("%s%% (computed from CPU per tick)", num(c)), c <= 1)
			rep.goal("2. heartbeat", fmt.Sprintf("%d claims: anonymous RSS ≤ 32 MiB", n), fmt.Sprintf("%s MiB anonymous (%s MiB RSS in all, the rest file-backed)", num(r), num(rss.vals.median())), r <= 32)
		}
	}
	return nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func childMain(args []string) int {
	fs := flag.NewFlagSet("heartbeat child", flag.ContinueOnError)
	n := fs.Int("n", 1000, "claims")
	ticks := fs.Int("ticks", 3, "ticks to time")
	dir := fs.String("dir", "", "store directory")
	prof := fs.String("cpuprofile", "", "CPU profile of the timed ticks")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	res, err := heartbeatChild(context.Background(), *n, *ticks, *dir, *prof)
	if err != nil {
		fmt.Fprintln(os.Stderr, "heartbeat child:", err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 1
	}
	return 0
}

func heartbeatChild(ctx context.Context, n, ticks int, dir, prof string) (heartbeatResult, error) {
	res := heartbeatResult{Claims: n}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	st, err := boltstore.Open(filepath.Join(dir, "board.db"), boltstore.Options{})
	if err != nil {
		return res, err
	}
	defer st.Close()
	loop, err := heartbeat.New(heartbeat.Config{Store: st, Lease: func() time.Duration { return benchLease }})
	if err != nil {
		return res, err
	}
	start, err := pidprobe.New().Identify(ctx, os.Getpid())
	if err != nil {
		return res, fmt.Errorf("own identity: %w", err)
	}
	owner := heartbeat.Owner{PID: os.Getpid(), Start: start}
	host, _ := pidprobe.Hostname()
	if host == "" {
		host = "benchhost"
	}
	marker := board.WorkerMarker(host, os.Getpid())

	// Claims are set up from many goroutines so the store's group commit
	// shares fsyncs between them; this is setup, not measured.
	t0 := time.Now()
	const setupWorkers = 32
	var wg sync.WaitGroup
	errs := make(chan error, setupWorkers)
	for w := range setupWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += setupWorkers {
				id := fmt.Sprintf("card-%05d", i)
				if _, err := st.CreateCard(ctx, board.CreateCardParams{ID: id}); err != nil {
					errs <- err
					return
				}
				attempt := time.Now()
				held, err := st.Claim(ctx, board.ClaimParams{Card: id, Marker: marker, Lease: benchLease})
				tok := held.Token()
				if err != nil {
					errs <- err
					return
				}
				if err := loop.Add(board.Hold{Card: id, Token: tok}, owner, attempt, benchLease); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return res, fmt.Errorf("setup: %w", err)
	}
	res.Setup = time.Since(t0).Seconds()

	// One untimed tick first: the first renewal after setup rewrites every
	// card's lease and warms the page cache, as any tick after it does.
	if r := loop.RunOnce(ctx); r.Err != nil || r.Renewed != n {
		return res, fmt.Errorf("warm-up tick renewed %d of %d: %v", r.Renewed, n, r.Err)
	}
	if prof != "" {
		f, err := os.Create(prof)
		if err != nil {
			return res, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return res, err
		}
		defer pprof.StopCPUProfile()
	}
	for range ticks {
		c0, w0 := cpuTime(), time.Now()
		r := loop.RunOnce(ctx)
		wall, cpu := time.Since(w0), cpuTime()-c0
		if r.Err != nil || r.Renewed != n || r.StoreCalls != 1 {
			return res, errors.Join(fmt.Errorf("tick renewed %d of %d in %d store calls", r.Renewed, n, r.StoreCalls), r.Err)
		}
		res.TickMS = append(res.TickMS, float64(wall)/float64(time.Millisecond))
		res.CPUMS = append(res.CPUMS, float64(cpu)/float64(time.Millisecond))
	}
	res.RSS, res.PeakRSS = rssBytes()
	res.RSSAnon, res.RSSFile = rssSplit()
	return res, nil
}
