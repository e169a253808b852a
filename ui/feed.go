package ui

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

// feedState is the UI server's link to the agent's event stream, as the
// header shows it.
type feedState struct {
	Connected bool
	// Seq is the last event read.
	Seq   int64
	Error string
}

// change is what the browser is told: an event happened (Seq > 0), the
// server's link to the agent came back after a break and events may have
// been missed (Resync), or it broke (Down, with the reason).
type change struct {
	Seq    int64  `json:"seq,omitempty"`
	Type   string `json:"type,omitempty"`
	Card   string `json:"card,omitempty"`
	Resync bool   `json:"resync,omitempty"`
	Down   string `json:"down,omitempty"`
}

// eventRef is where one of a card's events lies: its sequence number and
// its position in the log as the feed read it (how many events came
// before it), so a read of the log from one of a card's events to another
// asks for exactly the events between them.
type eventRef struct{ seq, pos int64 }

// feed follows the agent's audit log (GET /v1/events?follow=true) and fans
// every event out to the browsers subscribed. One follower serves every
// page; after a broken stream it reconnects and resumes after the last
// event it read.
type feed struct {
	c    *client.Client
	runs *runCache
	log  *slog.Logger
	// hist counts the moves the charts draw (nil: none).
	hist *history

	mu   sync.Mutex
	st   feedState
	subs map[chan change]struct{}
	// byCard indexes the log the feed has read by card: the card page
	// reads a card's events through it instead of scanning the log. read
	// counts the events recorded, last is the newest one's seq. 16 bytes
	// an event.
	byCard map[string][]eventRef
	read   int64
	last   int64
	// down is the last reason the pages were told the agent is down;
	// empty while the link is up.
	down string
}

func newFeed(c *client.Client, runs *runCache, log *slog.Logger) *feed {
	return &feed{c: c, runs: runs, log: log, subs: map[chan change]struct{}{}, byCard: map[string][]eventRef{}}
}

// record adds ev to the index. The feed reads the log in order, from its
// first event (tail), then from the follow stream.
func (f *feed) record(ev board.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ev.Seq <= f.last {
		return
	}
	if ev.Card != "" {
		f.byCard[ev.Card] = append(f.byCard[ev.Card], eventRef{seq: ev.Seq, pos: f.read})
	}
	f.read++
	f.last = ev.Seq
	if f.hist != nil {
		f.hist.move(ev)
	}
}

// cardRefs returns where card id's events lie in the log, and the last
// seq the index has read: the log after it is not indexed yet.
func (f *feed) cardRefs(id string) ([]eventRef, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.byCard[id]), f.last
}

// retryAfter is how long the follower waits before it reconnects a broken
// stream, doubling up to a ceiling.
const (
	retryFirst = 200 * time.Millisecond
	retryMax   = 5 * time.Second
)

// run follows the stream until ctx ends. It starts from the end of the log
// as it is now: the pages read the board itself, the stream only says when
// to read it again. Reading the log up to there builds the card index.
func (f *feed) run(ctx context.Context) {
	after := f.tail(ctx)
	wait := retryFirst
	for ctx.Err() == nil {
		err := f.c.FollowEvents(ctx, after, func(ev board.Event) error {
			wait = retryFirst
			after = ev.Seq
			f.event(ev)
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		f.broke(err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, retryMax)
		// The follow resumes after the last event read, so no event is
		// skipped; the pages are told to re-read the board all the same,
		// since what they show was read while the link was down.
		_, err = f.c.Events(ctx, after, 1)
		switch {
		case err == nil:
			f.resync(after)
		case errors.Is(err, board.ErrEventsPruned):
			// Retention pruned the log past the last event read
			// (DESIGN.md#retention): that position is refused for good,
			// so the feed starts over from the log as it is, as at start.
			f.log.Warn("the agent's event log was pruned past the feed's position; reading it again from its start", "after", after, "err", err)
			after = f.tail(ctx)
			f.resync(after)
		}
	}
}

// tail finds the last event's sequence number by paging through the log;
// 0 when the agent cannot be read yet (the follow then starts from the
// beginning, which is only slower).
func (f *feed) tail(ctx context.Context) int64 {
	var after int64
	for ctx.Err() == nil {
		evs, err := f.c.Events(ctx, after, 10000)
		if err != nil {
			f.broke(err)
			return after
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			f.record(ev)
		}
		after = evs[len(evs)-1].Seq
	}
	f.mu.Lock()
	f.st = feedState{Connected: true, Seq: after}
	f.down = ""
	f.mu.Unlock()
	return after
}

func (f *feed) event(ev board.Event) {
	f.record(ev)
	if ev.Data.RunID != "" {
		f.runs.forget(ev.Data.RunID)
	}
	f.mu.Lock()
	f.st = feedState{Connected: true, Seq: ev.Seq}
	f.down = ""
	f.mu.Unlock()
	f.send(change{Seq: ev.Seq, Type: string(ev.Type), Card: ev.Card})
}

// broke notes the link to the agent down, and tells the pages why when
// that is news: first the stream's end, then (the reconnects failing) that
// nothing answers.
func (f *feed) broke(err error) {
	down := agentDown(f.c, err)
	f.mu.Lock()
	f.st.Connected = false
	if err != nil {
		f.st.Error = err.Error()
	}
	news := down != f.down
	f.down = down
	f.mu.Unlock()
	f.log.Warn("agent event stream broke; reconnecting", "err", err)
	if news {
		f.send(change{Down: down})
	}
}

func (f *feed) resync(seq int64) {
	f.runs.clear()
	f.mu.Lock()
	f.st = feedState{Connected: true, Seq: seq}
	f.down = ""
	f.mu.Unlock()
	f.send(change{Resync: true})
}

func (f *feed) state() feedState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

// send hands c to every subscriber. A subscriber whose buffer is full
// already has a refresh pending, which will read the board as it is after
// this change too, so dropping the message for it loses nothing.
func (f *feed) send(c change) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.subs {
		select {
		case ch <- c:
		default:
		}
	}
}

func (f *feed) subscribe() (<-chan change, func()) {
	ch := make(chan change, 16)
	f.mu.Lock()
	f.subs[ch] = struct{}{}
	f.mu.Unlock()
	return ch, func() {
		f.mu.Lock()
		delete(f.subs, ch)
		f.mu.Unlock()
	}
}
