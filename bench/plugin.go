package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins"
	"github.com/leasekeeper/leasekeeper/plugins/serve"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// pluginFlag re-executes this binary as a store plugin serving a bbolt
// file, as the agent re-executes itself for its built-in stores.
const pluginFlag = "-bench-child-plugin"

func pluginMain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: bench", pluginFlag, "FILE")
		return 2
	}
	serveProfileSignals(args[0])
	var st *boltstore.Store
	err := serve.Serve(func(context.Context) (board.Store, error) {
		s, err := boltstore.Open(args[0], boltstore.Options{})
		st = s
		return s, err
	})
	if st != nil {
		if err := writeWALStats(args[0], st.Stats()); err != nil {
			fmt.Fprintln(os.Stderr, "bench plugin:", err)
		}
	}
	if err != nil {
		return 1
	}
	return 0
}

// launchStorePlugin serves the bbolt file from a child process behind the
// go-plugin boundary (this binary re-executed, as the agent re-executes
// itself for its built-in stores) and waits until the store answers.
// protocols, when set, limits the protocol versions offered (see
// plugins.LaunchConfig.Protocols).
func launchStorePlugin(ctx context.Context, file string, protocols ...int) (*plugins.Proxy, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	proxy, err := plugins.Launch(ctx, plugins.LaunchConfig{
		Cmd:       func() *exec.Cmd { return exec.Command(exe, pluginFlag, file) },
		Protocols: protocols,
	})
	if err != nil {
		return nil, fmt.Errorf("launch store plugin: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = proxy.WaitUp(wctx)
	cancel()
	if err != nil {
		proxy.Close()
		return nil, fmt.Errorf("store plugin not up: %w", err)
	}
	return proxy, nil
}

func runPlugin(ctx context.Context, cfg config, rep *report) error {
	sec := rep.section("5. The plugin boundary",
		`Claim + release cycles (as in scenario 1) against the same bbolt store twice: in this process, and
through the go-plugin gRPC boundary (plugins.Launch; the store served by a child process, this binary
re-executed, as the agent does for its built-in stores). The boundary as shipped carries concurrent
calls on one gRPC stream, many to a message; the third row offers the plugin only protocol 3, one
RPC per call, as the boundary was before. Interleaved within each repeat. The goal (at 8 workers) is
that the boundary costs at most 15% of the in-process throughput.`)
	for _, workers := range cfg.workers {
		dir := filepath.Join(cfg.tmp, fmt.Sprintf("plugin-%d", workers))
		inCycle, inStop, err := setupInProcess(ctx, filepath.Join(dir, "inproc"), workers)
		if err != nil {
			return err
		}
		defer inStop()
		// The boundary as shipped (calls coalesced on the Calls stream), and
		// as it was (protocol 3: one RPC per call), each with its own file.
		plCycle, plStop, err := pluginCycle(ctx, filepath.Join(dir, "plugin"), workers)
		if err != nil {
			return err
		}
		defer plStop()
		unCycle, unStop, err := pluginCycle(ctx, filepath.Join(dir, "unary"), workers, 3)
		if err != nil {
			return err
		}
		defer unStop()
		warm := min(cfg.duration/5, 200*time.Millisecond)
		for _, c := range []cycleFunc{inCycle, plCycle, unCycle} {
			if _, err := measure(ctx, workers, warm, c); err != nil {
				return err
			}
		}
		in := sec.add(fmt.Sprintf("store in-process, %d workers", workers), "cycles/s", nil)
		pl := sec.add(fmt.Sprintf("store through the go-plugin boundary, %d workers", workers), "cycles/s", in)
		un := sec.add(fmt.Sprintf("same, one RPC per call (protocol 3), %d workers", workers), "cycles/s", in)
		for range cfg.repeat {
			for _, f := range []struct {
				fig   *row
				cycle cycleFunc
			}{{in, inCycle}, {pl, plCycle}, {un, unCycle}} {
				v, err := measure(ctx, workers, cfg.duration, f.cycle)
				if err != nil {
					return err
				}
				f.fig.vals = append(f.fig.vals, v)
			}
		}
		m, lo, hi := pl.ratio()
		measured := fmt.Sprintf("plugin/in-process = %s× (%s–%s): cost %s%%", num(m), num(lo), num(hi), num((1-m)*100))
		if workers == 8 {
			rep.goal("5. plugin", "boundary costs ≤ 15% of in-process throughput, 8 workers", measured, m >= 0.85)
		} else {
			sec.notef("%d workers (no goal): %s.", workers, measured)
		}
	}
	return nil
}

// pluginCycle launches the store plugin on a bbolt file in dir, offering
// the protocol versions given (all when none), creates the workers' cards
// and returns their claim + release cycle, and the plugin's stop.
func pluginCycle(ctx context.Context, dir string, workers int, protocols ...int) (cycleFunc, func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	proxy, err := launchStorePlugin(ctx, filepath.Join(dir, "board.db"), protocols...)
	if err != nil {
		return nil, nil, err
	}
	stop := func() { proxy.Close() }
	for w := range workers {
		if _, err := proxy.CreateCard(ctx, board.CreateCardParams{ID: cardID(w)}); err != nil {
			stop()
			return nil, nil, err
		}
	}
	return func(ctx context.Context, w int) error {
		marker := board.WorkerMarker("benchhost", 1000+w)
		held, err := proxy.Claim(ctx, board.ClaimParams{Card: cardID(w), Marker: marker, Lease: benchLease})
		tok := held.Token()
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		if err := proxy.ReleaseOwned(ctx, board.OwnedParams{Card: cardID(w), Token: tok}); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		return nil
	}, stop, nil
}
