package ui

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

// filter narrows the board to one state, one label and one holder, and to
// the cards whose id or title contains Q (case-insensitive); an empty field
// does not narrow. Show is how many cards a column shows (by state name)
// where the page asked for more than a page of them.
type filter struct {
	State, Label, Holder, Q string
	Show                    map[string]int
}

func (f filter) match(c board.Card) bool {
	return (f.State == "" || c.State == f.State) &&
		(f.Label == "" || slices.Contains(c.Labels, f.Label)) &&
		(f.Holder == "" || c.Claim == f.Holder) &&
		(f.Q == "" || containsFold(c.ID, f.Q) || containsFold(c.Title, f.Q))
}

// containsFold says whether s contains q, ignoring case.
func containsFold(s, q string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(q))
}

// columnPage is how many cards a column shows at first, and how many more
// each "more" adds: a column of 10,000 cards is a page of them and a count,
// not 10,000 articles (docs/OPERATIONS.md, "Large boards").
const columnPage = 50

// maxShown bounds what a column can be asked to show.
const maxShown = 5000

// attentionPage is how many Needs-attention entries the lane lists.
const attentionPage = 50

// query is f as the board's query string, for links that keep it.
func (f filter) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"state": f.State, "label": f.Label, "holder": f.Holder, "q": f.Q} {
		if v != "" {
			q.Set(k, v)
		}
	}
	for _, st := range sortedKeys(boolKeys(f.Show)) {
		q.Add("show", st+":"+strconv.Itoa(f.Show[st]))
	}
	return q
}

// shown is how many cards column state shows.
func (f filter) shown(state string) int {
	if n, ok := f.Show[state]; ok && n > columnPage {
		return min(n, maxShown)
	}
	return columnPage
}

// moreHref is the board's address with column state showing n cards.
func (f filter) moreHref(state string, n int) string {
	g := f
	g.Show = maps.Clone(f.Show)
	if g.Show == nil {
		g.Show = map[string]int{}
	}
	g.Show[state] = n
	return "/?" + g.query().Encode()
}

// boardView is what the board page renders.
type boardView struct {
	Now       time.Time
	Health    healthView
	Attention []attention
	// AttentionTotal counts the lane's entries; Attention lists the first
	// attentionPage of them.
	AttentionTotal int
	Columns        []column
	Watchdog       watchdogView
	Filter         filter
	// The values the filters offer, from the whole board.
	States, Labels, Holders []string
	Shown, Total            int
	// RefreshMS is how often the page re-reads the board while no event
	// arrives: leases are renewed without an event, so a countdown would
	// otherwise run out on a card whose lease the agent keeps extending.
	RefreshMS int64
	// Charts are the throughput, queue depth and lease health over time.
	Charts []chart
	// Parts are the live region, rendered (a full render only).
	Parts partSet
	// Down: the agent could not be read; the page says why and waits.
	Down *downView
}

// column is one state's cards: the first Shown of Count (after the filter).
type column struct {
	State board.State
	Cards []cardView
	Count int
	// More is how many cards the column does not show; MoreHref the
	// board's address with the next page shown too.
	More     int
	MoreHref string
}

// cardView is one card with what the board shows beside it.
type cardView struct {
	board.Card
	// LeaseMS is how long the lease is still trusted as of the render (it
	// may be negative: expired that long ago); meaningful when Leased.
	LeaseMS  int64
	Leased   bool
	Expired  bool
	Recovery bool
	// ClaimedMS is how long ago the claim was granted.
	ClaimedMS  int64
	LastRun    *board.Run
	RunErr     string
	Blockers   []blocker
	Dependents []string
}

type blocker struct {
	ID, State string
	Complete  bool
	Missing   bool
}

// attention is one entry of the Needs-attention lane.
type attention struct {
	Kind  string // "gave-up", "expired", "recovery", "unleased"
	Card  cardView
	Title string
	Why   string
}

type healthView struct {
	Agent      string
	Version    string
	Backend    string
	Liveness   string
	LeaseMS    int64
	Reachable  bool
	StoreError string
	CheckMS    float64
	Plugin     *apitype.PluginInfo
	LastWrite  *apitype.WriteInfo
	Tick       *apitype.HeartbeatTick
	IntervalMS int64
	// TickLate: the last tick ended more than two intervals ago.
	TickLate   bool
	ClaimsHeld int
	Draining   bool
	// Feed is the UI server's own link to the agent's event stream.
	Feed feedState
}

type watchdogView struct {
	Enabled    bool
	IntervalMS int64
	Batch      int
	LastPass   *passView
}

type passView struct {
	apitype.ReaperPass
	Rows    []decisionRow
	Actions []count
	Sweeps  []count
	Err     string
}

type count struct {
	Name string
	N    int
}

// decisionRow is a ReaperDecision with the decision table's action, row and
// reason taken apart from the agent's one-line description of it.
type decisionRow struct {
	apitype.ReaperDecision
	Decision string
	Row      int
	Why      string
}

// describedDecision is the agent's description of a decision: "ACTION (row
// N): REASON".
var describedDecision = regexp.MustCompile(`^(\S+) \(row (\d+)\): (.*)$`)

func rowsOf(p apitype.ReaperPass) []decisionRow {
	out := make([]decisionRow, 0, len(p.Decisions))
	for _, d := range p.Decisions {
		r := decisionRow{ReaperDecision: d, Why: d.Reason}
		if m := describedDecision.FindStringSubmatch(d.Reason); m != nil {
			r.Decision, r.Why = m[1], m[3]
			r.Row, _ = strconv.Atoi(m[2])
		}
		out = append(out, r)
	}
	return out
}

func counts(m map[string]int) []count {
	out := make([]count, 0, len(m))
	for k, v := range m {
		out = append(out, count{k, v})
	}
	slices.SortFunc(out, func(a, b count) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func newPassView(p apitype.ReaperPass) *passView {
	return &passView{ReaperPass: p, Rows: rowsOf(p), Actions: counts(p.Actions), Sweeps: counts(p.Sweeps)}
}

// loadBoard reads the board, the cards and the agent's status and builds
// the board page.
func (s *Server) loadBoard(ctx context.Context, f filter) (boardView, error) {
	c := s.cfg.Client
	b, err := c.Board(ctx)
	if err != nil {
		return boardView{}, fmt.Errorf("read the board: %w", err)
	}
	cards, err := s.cards.list(ctx, c, s.feed.state())
	if err != nil {
		return boardView{}, fmt.Errorf("list the cards: %w", err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		return boardView{}, fmt.Errorf("read the agent's status: %w", err)
	}
	now := s.now()
	v := boardView{
		Now:       now,
		Health:    s.health(st),
		Filter:    f,
		Total:     len(cards),
		RefreshMS: min(max(st.Heartbeat.IntervalMS, 500), 5000),
		Watchdog: watchdogView{
			Enabled: st.Reaper.Enabled, IntervalMS: st.Reaper.IntervalMS, Batch: st.Reaper.Batch,
		},
	}
	if st.Reaper.LastPass != nil {
		v.Watchdog.LastPass = newPassView(*st.Reaper.LastPass)
	}
	views := cardViews(b, cards, now)
	s.hist.sample(now, b, views)
	v.Charts = s.hist.charts(b, now)
	lease := time.Duration(st.LeaseMS) * time.Millisecond
	v.Attention = needsAttention(views, st, lease)
	v.AttentionTotal = len(v.Attention)
	if len(v.Attention) > attentionPage {
		v.Attention = v.Attention[:attentionPage]
	}

	labels, holders := map[string]bool{}, map[string]bool{}
	for _, cv := range views {
		for _, l := range cv.Labels {
			labels[l] = true
		}
		if cv.Claim != "" {
			holders[cv.Claim] = true
		}
	}
	v.Labels, v.Holders = sortedKeys(labels), sortedKeys(holders)
	byState := map[string][]cardView{}
	for _, cv := range views {
		if f.match(cv.Card) {
			byState[cv.State] = append(byState[cv.State], cv)
			v.Shown++
		}
	}
	for _, state := range b.States {
		v.States = append(v.States, state.Name)
		if f.State != "" && state.Name != f.State {
			continue
		}
		v.Columns = append(v.Columns, s.column(ctx, f, state, byState[state.Name]))
		delete(byState, state.Name)
	}
	// A card in a state the board no longer has (a sweep in progress)
	// still shows, in a column of its own after the board's.
	for _, name := range sortedKeys(boolKeys(byState)) {
		v.Columns = append(v.Columns, s.column(ctx, f, board.State{Name: name}, byState[name]))
	}
	return v, nil
}

// column is the first page of a state's cards, each shown with its last
// run (read only for the cards shown).
func (s *Server) column(ctx context.Context, f filter, state board.State, cards []cardView) column {
	col := column{State: state, Count: len(cards)}
	n := f.shown(state.Name)
	if len(cards) > n {
		col.More = len(cards) - n
		col.MoreHref = f.moreHref(state.Name, n+columnPage)
		cards = cards[:n]
	}
	col.Cards = make([]cardView, len(cards))
	for i, cv := range cards {
		s.addRun(ctx, &cv)
		col.Cards[i] = cv
	}
	return col
}

// cardViews adds to each card its lease and its dependency links (its last
// run is read for the cards shown only: addRun).
func cardViews(b board.Board, cards []board.Card, now time.Time) []cardView {
	byID := make(map[string]board.Card, len(cards))
	dependents := map[string][]string{}
	for _, c := range cards {
		byID[c.ID] = c
		for _, d := range c.DependsOn {
			dependents[d] = append(dependents[d], c.ID)
		}
	}
	out := make([]cardView, 0, len(cards))
	for _, c := range cards {
		cv := newCardView(c, now)
		cv.Dependents = dependents[c.ID]
		for _, d := range c.DependsOn {
			bc, ok := byID[d]
			cv.Blockers = append(cv.Blockers, blocker{ID: d, State: bc.State, Missing: !ok, Complete: ok && b.IsCompletion(bc.State)})
		}
		out = append(out, cv)
	}
	return out
}

func newCardView(c board.Card, now time.Time) cardView {
	cv := cardView{Card: c}
	if c.Claimed() {
		cv.Recovery = board.IsRecoveryMarker(c.Claim)
		cv.ClaimedMS = now.Sub(c.ClaimedAt).Milliseconds()
		if !c.ClaimLeaseUntil.IsZero() {
			cv.Leased = true
			cv.LeaseMS = c.ClaimLeaseUntil.Sub(now).Milliseconds()
			cv.Expired = c.LeaseExpired(now)
		}
	}
	return cv
}

// addRun reads cv's last run (through the run cache).
func (s *Server) addRun(ctx context.Context, cv *cardView) {
	if c := cv.Card; c.LastRunID != "" {
		run, err := s.runs.get(ctx, s.cfg.Client, c.LastRunID)
		switch {
		case err == nil:
			cv.LastRun = &run
		case errors.Is(err, board.ErrNotFound):
			cv.RunErr = "gone"
		default:
			cv.RunErr = err.Error()
		}
	}
}

// needsAttention picks the cards an operator should look at: those the
// watchdog gave up on, claims whose lease ran out and that the watchdog
// keeps (or has not judged yet), recovery claims held longer than a lease
// and legacy un-leased claims.
func needsAttention(views []cardView, st apitype.Status, lease time.Duration) []attention {
	kept := map[string]apitype.ReaperDecision{}
	if p := st.Reaper.LastPass; p != nil {
		for _, d := range p.Decisions {
			kept[d.Card] = d
		}
	}
	var out []attention
	for _, cv := range views {
		if g := cv.GaveUp; g != nil {
			why := g.Reason
			if g.RunID != "" {
				why = fmt.Sprintf("run %s: %s", g.RunID, g.Reason)
			}
			out = append(out, attention{Kind: "gave-up", Card: cv, Title: "gave up", Why: why})
		}
		switch {
		case cv.Recovery && lease > 0 && time.Duration(cv.ClaimedMS)*time.Millisecond > lease:
			out = append(out, attention{Kind: "recovery", Card: cv, Title: "recovery claim older than a lease",
				Why: fmt.Sprintf("%s has held it for %s (lease %s): the watchdog that took it over did not finish", cv.Claim,
					(time.Duration(cv.ClaimedMS) * time.Millisecond).Round(time.Second), lease)})
		case cv.Expired && !cv.Recovery:
			why := "not judged yet: the next watchdog pass decides it"
			switch d, ok := kept[cv.ID]; {
			case !st.Reaper.Enabled:
				why = "the watchdog's gate is off: it decides nothing (run the preview to see what it would do)"
			case ok && d.Action == "kept":
				why = "the watchdog keeps it: " + d.Reason
			case ok:
				why = fmt.Sprintf("last pass: %s: %s", d.Action, d.Reason)
			}
			out = append(out, attention{Kind: "expired", Card: cv, Title: "claim expired", Why: why})
		case cv.Claimed() && !cv.Leased:
			out = append(out, attention{Kind: "unleased", Card: cv, Title: "un-leased claim",
				Why: "a legacy claim without a lease: only the un-leased sweep reclaims it"})
		}
	}
	return out
}

func (s *Server) health(st apitype.Status) healthView {
	h := healthView{
		Agent: st.Marker, Version: st.Version, Backend: st.Backend.String(), Liveness: st.Liveness, LeaseMS: st.LeaseMS,
		Reachable: st.Store.Reachable, StoreError: st.Store.Error, CheckMS: st.Store.CheckMS,
		Plugin: st.Store.Plugin, LastWrite: st.Store.LastWrite,
		Tick: st.Heartbeat.LastTick, IntervalMS: st.Heartbeat.IntervalMS,
		ClaimsHeld: st.ClaimsHeld, Draining: st.Draining, Feed: s.feed.state(),
	}
	if h.Tick != nil && h.IntervalMS > 0 && h.Tick.AgoMS > 2*h.IntervalMS {
		h.TickLate = true
	}
	return h
}

// cardPage is what a card's page renders.
type cardPage struct {
	Now    time.Time
	Card   cardView
	Runs   []board.Run
	RunErr map[string]string
	Events []board.Event
	// EventsCapped: the log past the feed's index is longer than the
	// page scans.
	EventsCapped bool
	Timeline     timeline
	Health       healthView
	RefreshMS    int64
	Parts        partSet
	Down         *downView // never set: an unreachable agent is the error page
}

// maxScannedEvents bounds how much of the log past the feed's index a
// card page reads (the index is behind only while the feed starts).
const maxScannedEvents = 200_000

func (s *Server) loadCard(ctx context.Context, id string) (cardPage, error) {
	c := s.cfg.Client
	card, err := c.GetCard(ctx, id)
	if err != nil {
		return cardPage{}, err
	}
	b, err := c.Board(ctx)
	if err != nil {
		return cardPage{}, fmt.Errorf("read the board: %w", err)
	}
	cards, err := s.cards.list(ctx, c, s.feed.state())
	if err != nil {
		return cardPage{}, fmt.Errorf("list the cards: %w", err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		return cardPage{}, fmt.Errorf("read the agent's status: %w", err)
	}
	now := s.now()
	p := cardPage{Now: now, Health: s.health(st), RunErr: map[string]string{},
		RefreshMS: min(max(st.Heartbeat.IntervalMS, 500), 5000)}
	for _, cv := range cardViews(b, append(cards, card), now) {
		if cv.ID == id {
			p.Card = cv // the last one: the card as just read
		}
	}
	s.addRun(ctx, &p.Card)
	for _, rid := range card.Runs {
		run, err := s.runs.get(ctx, c, rid)
		if err != nil {
			p.RunErr[rid] = err.Error()
			p.Runs = append(p.Runs, board.Run{ID: rid})
			continue
		}
		p.Runs = append(p.Runs, run)
	}
	p.Events, p.EventsCapped, err = s.cardEvents(ctx, id)
	if err != nil {
		return cardPage{}, fmt.Errorf("read the events: %w", err)
	}
	p.Timeline = newTimeline(b, p.Card, p.Runs, p.Events, now)
	return p, nil
}

// A card's events are read in stretches of the log: one request reads a
// run of the card's events that lie at most eventGap events apart, and at
// most eventWindow events long; an event far from the others is a request
// of its own.
const (
	eventGap    = 16
	eventWindow = 1000
)

// cardEvents reads card id's events through the feed's index (which
// events are the card's, and where they lie in the log), then the part of
// the log the index has not read yet: normally nothing. Reading the whole
// log for one card cost a page 370 ms at 4,400 events (docs/OPERATIONS.md,
// "Large boards").
func (s *Server) cardEvents(ctx context.Context, id string) ([]board.Event, bool, error) {
	c := s.cfg.Client
	refs, indexed := s.feed.cardRefs(id)
	var out []board.Event
	for i := 0; i < len(refs); {
		j := i
		for j+1 < len(refs) && refs[j+1].pos-refs[j].pos <= eventGap && refs[j+1].pos-refs[i].pos < eventWindow {
			j++
		}
		evs, err := c.Events(ctx, refs[i].seq-1, int(refs[j].pos-refs[i].pos+1))
		if errors.Is(err, board.ErrEventsPruned) {
			// Retention deleted the log below this stretch's start
			// (DESIGN.md#retention): the card's events before the first
			// the log keeps are gone, the rest are read as before.
			first, ferr := c.Events(ctx, 0, 1)
			if ferr != nil {
				return nil, false, ferr
			}
			kept := int64(math.MaxInt64)
			if len(first) > 0 {
				kept = first[0].Seq
			}
			k := i
			for k < len(refs) && refs[k].seq < kept {
				k++
			}
			if k == i {
				return nil, false, fmt.Errorf("the log refused a read of what it keeps: %w", err)
			}
			i = k
			continue
		}
		if err != nil {
			return nil, false, err
		}
		end := refs[i].seq - 1
		for _, ev := range evs {
			if ev.Seq > refs[j].seq {
				break
			}
			end = ev.Seq
			if ev.Card == id {
				out = append(out, ev)
			}
		}
		k := i
		for k < len(refs) && refs[k].seq <= end {
			k++
		}
		i = max(k, i+1) // an event no longer in the log (retention) is skipped
	}
	after := indexed
	for scanned := 0; ; {
		evs, err := c.Events(ctx, after, 10000)
		if err != nil {
			return nil, false, err
		}
		for _, ev := range evs {
			if ev.Card == id {
				out = append(out, ev)
			}
		}
		scanned += len(evs)
		if len(evs) < 10000 {
			return out, false, nil
		}
		if scanned >= maxScannedEvents {
			return out, true, nil
		}
		after = evs[len(evs)-1].Seq
	}
}

// cardCache keeps the last full listing of the cards and the feed's seq
// when it was read. While no event has arrived since, the cards are as
// listed but for their leases (a renewal writes no event), so a refresh
// lists the claimed cards only (an index read) and takes their claims from
// it: at 10,000 cards a full listing costs the agent a second on a busy
// host, and every open page refreshes on the heartbeat's schedule.
type cardCache struct {
	mu    sync.Mutex
	seq   int64
	at    time.Time
	cards []board.Card
}

// cardCacheTTL bounds how long a listing is reused.
const cardCacheTTL = time.Minute

func (cc *cardCache) list(ctx context.Context, c *client.Client, fs feedState) ([]board.Card, error) {
	cc.mu.Lock()
	cards := cc.cards
	fresh := cards != nil && fs.Connected && fs.Seq == cc.seq && time.Since(cc.at) < cardCacheTTL
	cc.mu.Unlock()
	if fresh {
		if out, ok := withClaims(ctx, c, cards); ok {
			return out, nil
		}
	}
	// fs was read before the listing: an event that lands meanwhile moves
	// the feed past it, and the next refresh lists again.
	cards, err := c.ListCards(ctx, board.ListCardsParams{})
	if err != nil {
		return nil, err
	}
	cards = slices.Clip(cards) // callers may append: never into the cache
	cc.mu.Lock()
	if fs.Connected {
		cc.cards, cc.seq, cc.at = cards, fs.Seq, time.Now()
	} else {
		cc.cards = nil
	}
	cc.mu.Unlock()
	return cards, nil
}

// withClaims is cards with the claims of the claimed cards read now; false
// when that cannot be trusted (the listing failed, or a card held in the
// cached listing is no longer claimed, which an event would have said).
func withClaims(ctx context.Context, c *client.Client, cards []board.Card) ([]board.Card, bool) {
	claimed, err := c.ListCards(ctx, board.ListCardsParams{ClaimedOnly: true})
	if err != nil {
		return nil, false
	}
	byID := make(map[string]board.Card, len(claimed))
	for _, cl := range claimed {
		byID[cl.ID] = cl
	}
	out := make([]board.Card, len(cards))
	n := 0
	for i, cd := range cards {
		if cl, ok := byID[cd.ID]; ok {
			out[i] = cl
			n++
			continue
		}
		if cd.Claimed() {
			return nil, false
		}
		out[i] = cd
	}
	return out, n == len(claimed)
}

// runCache keeps the runs the board shows, so a refresh does not read every
// card's last run again. The feed drops a run when an event names it, and
// everything when it lost events (a reconnect).
type runCache struct {
	mu   sync.Mutex
	gen  uint64 // bumped by every forget, so a read racing one is not kept
	runs map[string]board.Run
}

func newRunCache() *runCache { return &runCache{runs: map[string]board.Run{}} }

func (rc *runCache) get(ctx context.Context, c *client.Client, id string) (board.Run, error) {
	rc.mu.Lock()
	run, ok := rc.runs[id]
	gen := rc.gen
	rc.mu.Unlock()
	if ok {
		return run, nil
	}
	run, err := c.GetRun(ctx, id)
	if err != nil {
		return run, err
	}
	rc.mu.Lock()
	if rc.gen == gen {
		rc.runs[id] = run
	}
	rc.mu.Unlock()
	return run, nil
}

func (rc *runCache) forget(id string) {
	rc.mu.Lock()
	delete(rc.runs, id)
	rc.gen++
	rc.mu.Unlock()
}

func (rc *runCache) clear() {
	rc.mu.Lock()
	clear(rc.runs)
	rc.gen++
	rc.mu.Unlock()
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func boolKeys[V any](m map[string]V) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}
