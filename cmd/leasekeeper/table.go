package main

import (
	"io"
	"strings"

	"github.com/mattn/go-runewidth"
)

// titleWidth is how many display cells a title takes in `card ls`: a
// longer one is cut and ends in "…", so a long title does not wrap a row.
const titleWidth = 40

// truncateCells cuts s to at most w display cells, marking a cut with
// "…". Widths are display cells, not bytes or runes: a CJK character or
// an emoji takes two, as a terminal draws it.
func truncateCells(s string, w int) string {
	return runewidth.Truncate(s, w, "…")
}

// table writes rows in aligned columns, two spaces apart. Unlike
// text/tabwriter, which counts runes, it pads by display width, so a
// cell with wide characters (CJK, emoji) does not shift the columns after
// it. No line ends in spaces (an empty last cell leaves none).
type table struct {
	rows [][]string
}

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) error {
	var widths []int
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], runewidth.StringWidth(c))
		}
	}
	var b strings.Builder
	for _, r := range t.rows {
		var line strings.Builder
		for i, c := range r {
			line.WriteString(c)
			if i < len(r)-1 {
				line.WriteString(strings.Repeat(" ", widths[i]-runewidth.StringWidth(c)+2))
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// orDash is s, or "-" for an empty cell, so a column never reads as blank
// to a script splitting rows on whitespace.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
