package agent

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
)

// Cadence of the board-wide counts (DESIGN.md#queue-depth).
const (
	// BoardCountEvery is how often the counter looks whether the board
	// changed; a recount is one full listing of the cards.
	BoardCountEvery = 15 * time.Second
	// BoardCountMaxAge bounds how long counts are kept while the event log
	// shows no new event: past it the board is listed again anyway.
	BoardCountMaxAge = 5 * time.Minute
	// boardCountTimeout bounds one listing.
	boardCountTimeout = time.Minute
)

// boardCounter keeps the board-wide series — cards per state and cards
// carrying a claim — for the metrics (DESIGN.md#queue-depth).
//
// The counts are a recount, not a running tally of events: every
// BoardCountEvery the counter lists the board again, but only when the
// event log moved since the last listing (the effects tailer's cursor went
// past the one read before it), the board definition's states changed, or
// the counts are BoardCountMaxAge old. A recount is exact whatever the log
// held; a tally kept from events drifts for good on one event it misses,
// and the fleet's log can miss one (DESIGN.md#event-log: its lag is a
// bound, not a proof). An idle board costs no listing; a busy one one
// listing per BoardCountEvery per agent, whatever the scrape rate, and a
// scrape never waits for the store.
type boardCounter struct {
	// count counts the board's cards (board.Store.CountCards); list lists
	// them, for a store plugin built before CountCards, which answers it
	// unsupported: the counter then lists from that answer on.
	count  func(ctx context.Context) (board.CardCounts, error)
	list   func(ctx context.Context) ([]board.Card, error)
	boards func(ctx context.Context) (board.Board, error)
	// head is the effects tailer's cursor; nil recounts at every look.
	head   func() int64
	every  time.Duration
	maxAge time.Duration
	now    func() time.Time
	log    *slog.Logger

	mu       sync.Mutex
	last     *boardCount // nil until the first listing answered
	listOnly bool        // the store answered CountCards unsupported
}

// boardCount is one listing's result.
type boardCount struct {
	states  []string // the board's states, in its order
	cards   map[string]int
	claimed int
	at      time.Time // when the listing was asked for
	head    int64     // the tailer's cursor read before the listing
}

// run counts at once, then looks every c.every until ctx ends. A failed
// listing keeps the last counts (and their timestamp, which says how old
// they are); meteredStore counts the failure under count_cards (list_cards for an older store plugin).
func (c *boardCounter) run(ctx context.Context) {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		if err := c.look(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("counting the board's cards for the metrics", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// look recounts when the board may have changed since the last count.
func (c *boardCounter) look(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, boardCountTimeout)
	defer cancel()
	b, err := c.boards(ctx)
	if err != nil {
		return err
	}
	states := make([]string, len(b.States))
	for i, s := range b.States {
		states[i] = s.Name
	}
	var head int64
	if c.head != nil {
		head = c.head()
	}
	c.mu.Lock()
	last := c.last
	c.mu.Unlock()
	if last != nil && c.head != nil && head == last.head &&
		slices.Equal(states, last.states) && c.now().Sub(last.at) < c.maxAge {
		return nil
	}
	at := c.now()
	counts, err := c.counts(ctx)
	if err != nil {
		return err
	}
	n := &boardCount{states: states, cards: counts.States, claimed: counts.Claimed, at: at, head: head}
	c.mu.Lock()
	c.last = n
	c.mu.Unlock()
	return nil
}

// counts asks the store to count, or lists the cards and counts them when
// the store cannot (an older store plugin).
func (c *boardCounter) counts(ctx context.Context) (board.CardCounts, error) {
	c.mu.Lock()
	listOnly := c.listOnly || c.count == nil
	c.mu.Unlock()
	if !listOnly {
		counts, err := c.count(ctx)
		if !errors.Is(err, errors.ErrUnsupported) {
			return counts, err
		}
		c.log.Info("the store cannot count cards (a store plugin built before CountCards): listing them instead", "err", err)
		c.mu.Lock()
		c.listOnly = true
		c.mu.Unlock()
	}
	cards, err := c.list(ctx)
	if err != nil {
		return board.CardCounts{}, err
	}
	out := board.CardCounts{States: map[string]int{}}
	for _, card := range cards {
		out.States[card.State]++
		if card.Claimed() {
			out.Claimed++
		}
	}
	return out, nil
}

// boardSeries are the descriptors of the board-wide series, built from
// the options metrics.go names them with.
var (
	cardsDesc   = optsDesc(cardsOpts, "state")
	claimedDesc = optsDesc(cardsClaimedOpts)
	countedDesc = optsDesc(cardsCountedOpts)
)

func optsDesc(o prometheus.GaugeOpts, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(o.Name, o.Help, labels, nil)
}

// Describe and Collect make the counter a collector: a scrape reads the
// last listing's counts, one series per state of the board (0 for an
// empty one) and per state a card sits in that the board no longer names.
// Before the first listing answered there is no series at all: no count
// is better than a wrong zero.
func (c *boardCounter) Describe(ch chan<- *prometheus.Desc) {
	ch <- cardsDesc
	ch <- claimedDesc
	ch <- countedDesc
}

func (c *boardCounter) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	last := c.last
	c.mu.Unlock()
	if last == nil {
		return
	}
	seen := map[string]bool{}
	for _, s := range last.states {
		seen[s] = true
		ch <- prometheus.MustNewConstMetric(cardsDesc, prometheus.GaugeValue, float64(last.cards[s]), s)
	}
	var stray []string
	for s := range last.cards {
		if !seen[s] {
			stray = append(stray, s)
		}
	}
	slices.Sort(stray)
	for _, s := range stray {
		ch <- prometheus.MustNewConstMetric(cardsDesc, prometheus.GaugeValue, float64(last.cards[s]), s)
	}
	ch <- prometheus.MustNewConstMetric(claimedDesc, prometheus.GaugeValue, float64(last.claimed))
	ch <- prometheus.MustNewConstMetric(countedDesc, prometheus.GaugeValue, float64(last.at.UnixNano())/1e9)
}

// claimAges remembers when each claim this agent's workers hold was
// acquired (the card's claimed_at, the store's clock), for the age of the
// oldest (DESIGN.md#claim-age). Entries are added where a claim is granted
// (meteredStore) or adopted (the boot sweep) and dropped once the
// heartbeat no longer holds the claim. A grant is recorded before the
// heartbeat takes the claim on, so a record younger than claimNoteGrace is
// kept although the claim is not held yet.
type claimAges struct {
	mu    sync.Mutex
	since map[board.Hold]claimNote
}

type claimNote struct {
	claimedAt time.Time // the card's claimed_at (the store's clock)
	noted     time.Time // when it was recorded (this process's clock)
}

// claimNoteGrace is how long a recorded grant waits for the heartbeat to
// take its claim on before a prune may forget it.
const claimNoteGrace = time.Minute

func newClaimAges() *claimAges { return &claimAges{since: map[board.Hold]claimNote{}} }

// note records a granted claim; a retry that returns the same token keeps
// the first record.
func (c *claimAges) note(h board.Hold, claimedAt time.Time) {
	if claimedAt.IsZero() || h.Card == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.since[h]; !ok {
		c.since[h] = claimNote{claimedAt: claimedAt, noted: time.Now()}
	}
}

// size is the number of claims remembered.
func (c *claimAges) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.since)
}

// oldest returns the age at now of the oldest claim in held, 0 when none
// is held, and forgets the claims held no longer.
func (c *claimAges) oldest(held []heartbeat.Claim, now time.Time) time.Duration {
	keep := make(map[board.Hold]bool, len(held))
	for _, h := range held {
		keep[h.Hold] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Time
	for h, n := range c.since {
		if !keep[h] {
			if time.Since(n.noted) > claimNoteGrace {
				delete(c.since, h)
			}
			continue
		}
		if first.IsZero() || n.claimedAt.Before(first) {
			first = n.claimedAt
		}
	}
	if first.IsZero() {
		return 0
	}
	return max(now.Sub(first), 0)
}

// runVerdicts are the run statuses that are a verdict: the status label
// values of the run series (DESIGN.md#run-verdicts).
var runVerdicts = []board.RunStatus{
	board.RunFinished, board.RunFailed, board.RunFailedResumable, board.RunCancelled,
}

// The outcomes of leasekeeper_retries_total (DESIGN.md#retries).
const (
	retryRetried = "retried"
	retrySpent   = "spent"
)

// retried records what the retry policy made of a Finish written through
// this agent: a retry (the card backs off in the pool) or attempts spent
// (Finish stamps gave_up only then).
func (m *metrics) retried(f board.FinishResult) {
	switch {
	case f.Card.GaveUp != nil:
		m.retries.WithLabelValues(retrySpent).Inc()
	case f.Run.Retryable() && !f.Card.RetryAt.IsZero():
		m.retries.WithLabelValues(retryRetried).Inc()
	}
}

// verdict records a run that reached its verdict through this agent: its
// duration is from its creation to the verdict, both stamped by the store.
func (m *metrics) verdict(r board.Run) {
	if r.Status.Open() || !r.Status.Known() {
		return
	}
	s := string(r.Status)
	m.runsFinished.WithLabelValues(s).Inc()
	m.runDuration.WithLabelValues(s).Observe(max(r.UpdatedAt.Sub(r.CreatedAt), 0).Seconds())
}
