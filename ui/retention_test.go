package ui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// TestCardPageAfterItsEventsWerePruned: retention deletes a card's old
// events (DESIGN.md#retention) that the feed's index still lists. The card
// page reads the card's events through that index; it shows the card with
// the events the log keeps, and is not refused because a stretch of the
// log it asks for starts below the pruned position.
func TestCardPageAfterItsEventsWerePruned(t *testing.T) {
	t.Parallel()
	f := start(t, "")
	b := browser(t)
	f.login(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Follow the page stream: each event the feed has indexed is a change
	// with its seq.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.base+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "event: hello") {
	}

	c := &client.Client{Socket: f.agent.Socket}
	var last int64
	for _, id := range []string{"c0", "c1", "c2"} {
		if _, err := c.CreateCard(ctx, board.CreateCardParams{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := c.Events(ctx, 0, 100)
	if err != nil || len(evs) != 3 {
		t.Fatalf("events = %v, %v", evs, err)
	}
	last = evs[2].Seq
	for seen := int64(0); seen < last; {
		if !sc.Scan() {
			t.Fatalf("the page stream ended before seq %d: %v", last, sc.Err())
		}
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ch struct{ Seq int64 }
			if json.Unmarshal([]byte(data), &ch) == nil && ch.Seq > seen {
				seen = ch.Seq
			}
		}
	}

	// Prune every event (the effects layer's cursor allowing): poll until
	// the log is pruned through the last one.
	for deadline := time.Now().Add(20 * time.Second); ; {
		res, err := c.Prune(ctx, apitype.PruneRequest{OlderThanMS: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.EventsThrough >= last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log was not pruned through %d: %+v", last, res)
		}
		time.Sleep(20 * time.Millisecond)
	}

	if got := f.do(b, "GET", "/cards/c1", nil); got.code != http.StatusOK {
		t.Fatalf("GET /cards/c1 after its events were pruned: %d %s", got.code, got.body)
	}
}

// TestFeedReadsOnAfterTheLogWasPrunedWhileItWasAway: the agent is away
// (restarted) while the log is pruned past the last event the feed read.
// When the agent is back, the feed's follow from that position is refused
// (events_pruned): the feed starts over from the log as it is and goes on
// telling the pages of each event, instead of retrying the refused position
// for ever with the pages never updated again (DESIGN.md#retention).
func TestFeedReadsOnAfterTheLogWasPrunedWhileItWasAway(t *testing.T) {
	t.Parallel()
	a := agentproc.New(t, binary, "lease: 3s\n")
	a.Start()
	f := serve(t, a, a.Socket)
	b := browser(t)
	f.login(b)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.base+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	// waitFor reads the page stream until a change of card id, or (id
	// empty) the pages told to read the board again.
	waitFor := func(id string) {
		t.Helper()
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var ch struct {
					Card   string
					Resync bool
				}
				if json.Unmarshal([]byte(data), &ch) == nil && (id != "" && ch.Card == id || id == "" && ch.Resync) {
					return
				}
			}
		}
		t.Fatalf("the page stream ended before a change of %q: %v", id, sc.Err())
	}
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "event: hello") {
	}
	a.MustRun("card", "create", "c0")
	waitFor("c0")

	a.Stop()
	s, err := boltstore.Open(filepath.Join(a.Dir, "board.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "c2"} {
		if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	now, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Prune(ctx, board.PruneParams{Before: now.Add(time.Hour)})
	if err != nil || res.Events != 3 {
		t.Fatalf("Prune = %+v, %v; want the three events gone", res, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	a.Start()

	waitFor("") // the feed is back
	a.MustRun("card", "create", "c3")
	waitFor("c3")
}
