package plugins

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
	"github.com/leasekeeper/leasekeeper/storespec"
)

// BenchmarkClaimReleaseThroughThePlugin runs claim + release cycles on
// distinct cards from 8 goroutines per CPU against a bbolt store in this
// process, then served by the test plugin in its own process over each
// protocol: the cost of the boundary under load. Besides the time, it reports the CPU time each
// cycle cost the agent's side and the plugin's (which a busy machine
// disturbs far less than the time), and for protocol 4 how many calls
// shared each message on the Calls stream.
//
//	go test -run '^$' -bench ClaimRelease -cpu 1,4 ./plugins/
func BenchmarkClaimReleaseThroughThePlugin(b *testing.B) {
	b.Run("in-process", func(b *testing.B) {
		s, err := boltstore.Open(filepath.Join(b.TempDir(), "board.db"), boltstore.Options{Board: board.DefaultBoard(true)})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		claimRelease(b, s, 0, nil)
	})
	for _, proto := range []int{wire.UnaryProtocolVersion, wire.ProtocolVersion} {
		b.Run(fmt.Sprintf("protocol=%d", proto), func(b *testing.B) { benchClaimRelease(b, proto) })
	}
}

func benchClaimRelease(b *testing.B, proto int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := Launch(ctx, LaunchConfig{
		Cmd:       testPluginCmd(b, ""),
		Child:     &storespec.Spec{Backend: "bolt", Path: filepath.Join(b.TempDir(), "board.db"), Board: board.DefaultBoard(true), Lease: 30 * time.Second},
		Protocols: []int{proto},
	})
	if err != nil {
		b.Fatalf("Launch: %v", err)
	}
	defer p.Close()
	var calls, messages atomic.Int64
	if cc := p.cur.store.calls; cc != nil {
		cc.mu.Lock()
		cc.sending = func(batch *storepb.CallBatch) {
			messages.Add(1)
			calls.Add(int64(len(batch.GetCalls())))
		}
		cc.mu.Unlock()
	}
	claimRelease(b, p, p.Status().PID, func() {
		if m := messages.Load(); m > 0 {
			b.ReportMetric(float64(calls.Load())/float64(m), "calls/msg")
		}
	})
}

// claimRelease runs the cycles on store and reports their CPU time: this
// process's, and that of the plugin process pid when it is not 0.
func claimRelease(b *testing.B, store board.Store, pid int, report func()) {
	var next atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	agent0, plugin0 := selfCPU(b), procCPU(b, pid)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		n := int(next.Add(1))
		id := fmt.Sprintf("bench-%d", n)
		if _, err := store.CreateCard(ctx, board.CreateCardParams{ID: id}); err != nil {
			b.Error(err)
			return
		}
		marker := board.WorkerMarker("benchhost", 1000+n)
		for pb.Next() {
			card, err := store.Claim(ctx, board.ClaimParams{Card: id, Marker: marker, Lease: 30 * time.Second})
			tok := card.Token()
			if err != nil {
				b.Error(err)
				return
			}
			if err := store.ReleaseOwned(ctx, board.OwnedParams{Card: id, Token: tok}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	agent, plugin := selfCPU(b)-agent0, procCPU(b, pid)-plugin0
	b.ReportMetric(float64(agent.Microseconds())/float64(b.N), "agent-cpu-µs/op")
	if pid != 0 {
		b.ReportMetric(float64(plugin.Microseconds())/float64(b.N), "plugin-cpu-µs/op")
	}
	if report != nil {
		report()
	}
}

// selfCPU is the CPU time this process has used.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the CPU time process pid has used, from /proc (Linux).
func procCPU(b *testing.B, pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Skipf("reading the plugin's CPU time: %v", err)
	}
	// The fields after the command name, which is in parentheses: utime
	// and stime are the 12th and 13th of them, in clock ticks.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("parsing /proc/%d/stat: %q", pid, raw)
	}
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / ticks
}
