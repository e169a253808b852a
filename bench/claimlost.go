package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

func runClaimLost(ctx context.Context, cfg config, rep *report) error {
	sec := rep.section("4. Claim-lost latency",
		`A worker (the standard-library client) holds a claim through a real agent socket; an operator client
force-releases it (leasekeeper card release ID --force). Measured: from just before the operator's
request is sent until the worker's claim Context is cancelled (the claim_lost frame on the watch stream).
Samples are sequential, each on a fresh card and a fresh worker Client, 30 s lease.`)
	a, err := startAgent(ctx, filepath.Join(cfg.tmp, "claimlost"), benchLease)
	if err != nil {
		return err
	}
	defer a.stop()
	operator := &client.Client{Socket: a.path}
	var lat []time.Duration
	for i := range cfg.lostSamples {
		id := fmt.Sprintf("lost-%04d", i)
		if _, err := a.store.CreateCard(ctx, board.CreateCardParams{ID: id}); err != nil {
			return err
		}
		worker := &client.Client{Socket: a.path}
		cl, err := worker.Claim(ctx, id)
		if err != nil {
			return fmt.Errorf("claim %s: %w", id, err)
		}
		start := time.Now()
		if _, err := operator.ForceRelease(ctx, id); err != nil {
			return fmt.Errorf("force-release %s: %w", id, err)
		}
		// Bounded wait: well past the goal, far below the lease, so a lost
		// notification shows up as an error rather than as the client's own
		// deadline firing.
		wait := time.NewTimer(5 * time.Second)
		select {
		case <-cl.Context().Done():
			wait.Stop()
		case <-wait.C:
			return fmt.Errorf("card %s: the worker's context was not cancelled within 5s of the force-release", id)
		case <-ctx.Done():
			wait.Stop()
			return ctx.Err()
		}
		lat = append(lat, time.Since(start))
		if cause := context.Cause(cl.Context()); !errors.Is(cause, client.ErrClaimLost) {
			return fmt.Errorf("card %s: context ended with %v, want ErrClaimLost", id, cause)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
	r50 := sec.add("force-release → claim Context cancelled, p50", "ms", nil)
	r50.vals = sample{ms(p50)}
	r99 := sec.add("force-release → claim Context cancelled, p99", "ms", nil)
	r99.vals = sample{ms(p99)}
	rmax := sec.add("force-release → claim Context cancelled, max", "ms", nil)
	rmax.vals = sample{ms(percentile(lat, 1))}
	sec.notef("%d samples; the spread column is one value because p50/p99 are taken over all samples at once.", len(lat))
	budget := benchLease/3 + 100*time.Millisecond
	rep.goal("4. claim lost", fmt.Sprintf("p99 ≤ lease/3 + 100 ms = %s", budget),
		fmt.Sprintf("p50 %s ms, p99 %s ms = %s× the budget", num(ms(p50)), num(ms(p99)), num(ms(p99)/ms(budget))), p99 <= budget)
	return nil
}
