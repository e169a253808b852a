package ui

import (
	"fmt"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// timeline is a card's history on a time axis, drawn as inline SVG by the
// server (no script, nothing fetched): the state it was in, its claims and
// its runs as bars, every event as a tick. Start and End are the axis's
// ends: the card's creation and the render.
type timeline struct {
	Start, End time.Time
	Bars       []tlBar
	Ticks      []tlBar
	Lanes      []tlLane
	Height     int
}

type tlLane struct {
	Name string
	Y    int
}

// tlBar is a rectangle of the drawing, in its coordinates.
type tlBar struct {
	X, W  float64
	Y     int
	Class string
	Title string
}

// The drawing's geometry: a label column, then the axis.
const (
	tlWidth  = 900.0
	tlLabel  = 64.0
	tlLaneH  = 20
	tlBarH   = 14
	tlMinBar = 1.5
)

func newTimeline(b board.Board, cv cardView, runs []board.Run, evs []board.Event, now time.Time) timeline {
	start := cv.CreatedAt
	if len(evs) > 0 && (start.IsZero() || evs[0].At.Before(start)) {
		start = evs[0].At
	}
	if start.IsZero() || !start.Before(now) {
		start = now.Add(-time.Second)
	}
	tl := timeline{Start: start, End: now}
	span := now.Sub(start).Seconds()
	x := func(t time.Time) float64 {
		f := t.Sub(start).Seconds() / span
		return tlLabel + min(max(f, 0), 1)*(tlWidth-tlLabel-2)
	}
	bar := func(lane int, from, to time.Time, class, title string) {
		x0, x1 := x(from), x(to)
		tl.Bars = append(tl.Bars, tlBar{X: x0, W: max(x1-x0, tlMinBar), Y: lane*tlLaneH + 3, Class: class, Title: title})
	}
	for i, name := range []string{"state", "claim", "runs", "events"} {
		tl.Lanes = append(tl.Lanes, tlLane{Name: name, Y: i*tlLaneH + 14})
	}
	tl.Height = 4 * tlLaneH

	// States: from the creation (the first state event's From, or the card's
	// state when it never moved) to each move.
	state, since := cv.State, start
	for _, ev := range evs {
		if ev.Type == board.EventState && ev.Data.From != "" {
			state = ev.Data.From
			break
		}
	}
	for _, ev := range evs {
		if ev.Type != board.EventState {
			continue
		}
		bar(0, since, ev.At, stateClass(b, state), fmt.Sprintf("%s from %s", state, fmtTime(since)))
		state, since = ev.Data.To, ev.At
	}
	bar(0, since, now, stateClass(b, state), fmt.Sprintf("%s since %s", state, fmtTime(since)))

	// Claims: from each claimed event to the release (or the next claim,
	// a takeover); the claim held now runs to the end.
	var holder string
	var claimed time.Time
	for _, ev := range evs {
		switch ev.Type {
		case board.EventClaimed:
			if holder != "" {
				bar(1, claimed, ev.At, "claim", fmt.Sprintf("%s @%d until taken over", holder, ev.Data.Epoch-1))
			}
			holder, claimed = ev.Data.Marker, ev.At
			if ev.Data.Epoch > 0 {
				holder = fmt.Sprintf("%s @%d", ev.Data.Marker, ev.Data.Epoch)
			}
		case board.EventReleased:
			if holder != "" {
				bar(1, claimed, ev.At, "claim", fmt.Sprintf("%s, %s to %s", holder, fmtTime(claimed), fmtTime(ev.At)))
			}
			holder = ""
		}
	}
	if holder != "" && cv.Claimed() {
		bar(1, claimed, now, "claim held", fmt.Sprintf("%s since %s", holder, fmtTime(claimed)))
	}

	for _, r := range runs {
		if r.CreatedAt.IsZero() {
			continue
		}
		end := r.UpdatedAt
		if r.Status == board.RunRunning || end.IsZero() {
			end = now
		}
		bar(2, r.CreatedAt, end, "run run-"+string(r.Status), fmt.Sprintf("run %s %s, %s to %s", r.ID, r.Status, fmtTime(r.CreatedAt), fmtTime(end)))
	}

	for _, ev := range evs {
		tl.Ticks = append(tl.Ticks, tlBar{X: x(ev.At), W: tlMinBar, Y: 3*tlLaneH + 3, Class: "ev ev-" + string(ev.Type),
			Title: fmt.Sprintf("#%d %s %s", ev.Seq, ev.Type, fmtTime(ev.At))})
	}
	return tl
}

// stateClass colours a state's bar by what the state is.
func stateClass(b board.Board, name string) string {
	st, _ := b.State(name)
	switch {
	case st.Completion:
		return "st st-completion"
	case st.Terminal:
		return "st st-terminal"
	case st.Running:
		return "st st-running"
	case st.Pool:
		return "st st-pool"
	}
	return "st"
}
