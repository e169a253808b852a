package main

import (
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// TestFormatEventFixedWidth: an event line's time has one width whatever
// its fraction of a second (none, one digit, nanoseconds) and whatever
// zone it was read in, so the columns after it line up; the event type
// column is as wide as the longest type.
func TestFormatEventFixedWidth(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	east := time.FixedZone("east", 5*3600+1800)
	var lines []string
	for i, at := range []time.Time{
		base,
		base.Add(500 * time.Millisecond),
		base.Add(time.Microsecond),
		base.Add(123456789 * time.Nanosecond),
		base.Add(10 * time.Millisecond).In(east),
	} {
		for _, typ := range eventTypes {
			lines = append(lines, formatEvent(board.Event{Seq: int64(i + 1), Type: typ, Card: "c1", At: at}))
		}
	}
	col := strings.Index(lines[0], " c1")
	for _, l := range lines {
		if got := strings.Index(l, " c1"); got != col {
			t.Errorf("card column at %d in %q, want %d as in %q", got, l, col, lines[0])
		}
	}
	if got := lines[len(lines)-1]; !strings.Contains(got, "2026-12-02T07:00:00.010000Z") {
		t.Errorf("a time read in another zone prints %q, want it in UTC", got)
	}
}

// TestFormatEventNamesTheLabelChange: a labels event names the labels
// removed as well as those added, then the set after it.
func TestFormatEventNamesTheLabelChange(t *testing.T) {
	t.Parallel()
	got := formatEvent(board.Event{Seq: 9, Type: board.EventLabels, Card: "c1", At: time.Unix(0, 0), Actor: "uid:0",
		Data: board.EventData{Labels: []string{"gpu", "keep"}, Added: []string{"gpu"}, Removed: []string{"x86", "once:go"}}})
	if want := " c1 +gpu -x86 -once:go [gpu,keep] by uid:0"; !strings.HasSuffix(got, want) {
		t.Errorf("labels event = %q, want it to end %q", got, want)
	}
}
