package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

// startFerret starts the project's MongoDB-wire test server (embedded
// FerretDB behind the serializing proxy) on a loopback port and returns
// its URI and a stop function. The server exits when its stdin closes.
func startFerret(ctx context.Context) (string, func(), error) {
	bin, err := mongotest.Binary()
	if err != nil {
		return "", nil, fmt.Errorf("build the FerretDB test server: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, "-listen", "127.0.0.1:0")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	addr := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "LISTEN "); ok {
				addr <- a
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(done)
	}()
	stop := func() {
		stdin.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	select {
	case a := <-addr:
		return "mongodb://" + a + "/", stop, nil
	case <-done:
		return "", nil, fmt.Errorf("%s exited before listening", bin)
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return "", nil, fmt.Errorf("%s did not listen within 60s", bin)
	}
}

func runMongo(ctx context.Context, cfg config, rep *report) error {
	sec := rep.section("6. The MongoDB twin against the FerretDB test server — FUNCTIONAL ONLY",
		`These figures are NOT MongoDB's speed and are not compared with anything. The server is the project's
test server: an embedded FerretDB (SQLite backend) behind a proxy that serializes every request to make
it atomic, so every operation waits for all others. They show that the fleet twin's claim path works
under concurrency through the real driver and wire protocol, and what it costs on that test server.`)
	uri, stop, err := startFerret(ctx)
	if err != nil {
		return err
	}
	defer stop()
	for _, workers := range cfg.workers {
		st, err := mongostore.Open(ctx, mongostore.Options{URI: uri, Database: fmt.Sprintf("bench%d_%d", os.Getpid(), workers)})
		if err != nil {
			return fmt.Errorf("open the MongoDB twin: %w", err)
		}
		defer st.Close()
		for w := range workers {
			if _, err := st.CreateCard(ctx, board.CreateCardParams{ID: cardID(w)}); err != nil {
				return err
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
		r := sec.add(fmt.Sprintf("claim + release, %d workers (functional only)", workers), "cycles/s", nil)
		for range cfg.repeat {
			v, err := measure(ctx, workers, cfg.duration, cycle)
			if err != nil {
				return fmt.Errorf("MongoDB twin, %d workers: %w", workers, err)
			}
			r.vals = append(r.vals, v)
		}
	}
	rep.goals = append(rep.goals, goal{scenario: "6. MongoDB twin", target: "claim path works under concurrency against the FerretDB test server (functional only, no speed goal)",
		measured: "every claim and release succeeded in every repeat; figures in section 6", met: true})
	return nil
}
