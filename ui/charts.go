package ui

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// history is what the board's charts draw: the moves into each state per
// minute, counted by the feed from the log (so throughput covers the log's
// last hour even right after the UI starts), and samples of the queue
// depth and the claims' lease health taken as the board is read (at most
// one every sampleEvery; they cover the time the UI has been serving).
type history struct {
	mu      sync.Mutex
	moves   map[int64]map[string]int // minute (Unix seconds / 60) → to state → moves
	newest  int64
	samples []sample
}

type sample struct {
	At                   time.Time
	Queue, Held, Expired int
}

const (
	sampleEvery  = 10 * time.Second
	maxSamples   = 360 // an hour at one sample every 10 s
	chartMinutes = 60
)

func newHistory() *history { return &history{moves: map[int64]map[string]int{}} }

// move counts a state event.
func (h *history) move(ev board.Event) {
	if ev.Type != board.EventState || ev.Data.To == "" {
		return
	}
	m := ev.At.Unix() / 60
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.moves[m] == nil {
		h.moves[m] = map[string]int{}
	}
	h.moves[m][ev.Data.To]++
	if m > h.newest {
		h.newest = m
		for k := range h.moves {
			if k <= m-chartMinutes {
				delete(h.moves, k)
			}
		}
	}
}

// sample records the board as just read, unless a sample is recent.
func (h *history) sample(now time.Time, b board.Board, views []cardView) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.samples); n > 0 && now.Sub(h.samples[n-1].At) < sampleEvery {
		return
	}
	s := sample{At: now}
	for _, cv := range views {
		st, _ := b.State(cv.State)
		switch {
		case cv.Claimed():
			s.Held++
			if cv.Expired || !cv.Leased {
				s.Expired++
			}
		case st.Pool && !st.Running:
			s.Queue++
		}
	}
	h.samples = append(h.samples, s)
	if len(h.samples) > maxSamples {
		h.samples = append(h.samples[:0], h.samples[len(h.samples)-maxSamples:]...)
	}
}

// chart is one small line chart: its polyline in a 300×60 box, the
// largest value and the last.
type chart struct {
	Title, Unit string
	Points      string
	Max, Last   int
	Since       string
	Empty       bool
	Class       string
}

const (
	chartW = 300.0
	chartH = 60.0
)

func polyline(vals []int) (string, int) {
	if len(vals) == 1 {
		vals = []int{vals[0], vals[0]} // one sample: a flat line, not a dot
	}
	top := 1
	for _, v := range vals {
		top = max(top, v)
	}
	var b strings.Builder
	for i, v := range vals {
		x := 0.0
		if len(vals) > 1 {
			x = float64(i) * chartW / float64(len(vals)-1)
		}
		y := chartH - 2 - float64(v)*(chartH-4)/float64(top)
		fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
	}
	return strings.TrimSpace(b.String()), top
}

// charts draws the throughput (moves into a completion state per minute,
// the last hour), the queue depth (free cards in the pool states a worker
// claims from) and the lease health (claims held, and those whose lease
// ran out).
func (h *history) charts(b board.Board, now time.Time) []chart {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []chart

	nowMin := now.Unix() / 60
	done := make([]int, chartMinutes)
	for i := range done {
		for to, n := range h.moves[nowMin-int64(chartMinutes-1-i)] {
			if b.IsCompletion(to) {
				done[i] += n
			}
		}
	}
	c := chart{Title: "throughput", Unit: "completed a minute", Since: "the last hour", Class: "c-done"}
	c.Points, c.Max = polyline(done)
	c.Last = done[len(done)-1]
	out = append(out, c)

	queue, held, expired := make([]int, len(h.samples)), make([]int, len(h.samples)), make([]int, len(h.samples))
	for i, s := range h.samples {
		queue[i], held[i], expired[i] = s.Queue, s.Held, s.Expired
	}
	since := "no sample yet"
	if len(h.samples) > 0 {
		since = "since " + h.samples[0].At.UTC().Format("15:04:05Z")
	}
	for _, c := range []struct {
		chart
		vals []int
	}{
		{chart{Title: "queue depth", Unit: "free cards in the pool", Class: "c-queue"}, queue},
		{chart{Title: "claims held", Unit: "claims", Class: "c-held"}, held},
		{chart{Title: "leases run out", Unit: "expired or un-leased claims", Class: "c-expired"}, expired},
	} {
		c.Since = since
		c.Empty = len(c.vals) == 0
		if !c.Empty {
			c.Points, c.Max = polyline(c.vals)
			c.Last = c.vals[len(c.vals)-1]
		}
		out = append(out, c.chart)
	}
	return out
}
