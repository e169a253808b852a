package ui

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// funcs are the helpers the templates format with. Everything they return
// is a plain string: html/template escapes it for where it lands.
var funcs = template.FuncMap{
	"ms":         func(v int64) string { return fmtMS(v) },
	"lease":      fmtLease,
	"ts":         fmtTime,
	"pathEscape": url.PathEscape,
	"unixms":     func(t time.Time) int64 { return t.UnixMilli() },
	"sub":        func(a, b int) int { return a - b },
	"first": func(n int, v any) any {
		switch v := v.(type) {
		case []string:
			return v[:min(n, len(v))]
		case []decisionRow:
			return v[:min(n, len(v))]
		case []board.Event:
			return v[max(len(v)-n, 0):] // the newest n
		}
		return v
	},
	"eventData": func(d board.EventData) string {
		b, err := json.Marshal(d)
		if err != nil {
			return err.Error()
		}
		return string(b)
	},
}

// fmtMS prints a duration in milliseconds to a tenth of a second.
func fmtMS(v int64) string {
	return (time.Duration(v) * time.Millisecond).Round(100 * time.Millisecond).String()
}

// fmtLease is a countdown as first rendered; the page's script keeps it
// counting (app.js formats it the same way).
func fmtLease(v int64) string {
	if v < 0 {
		return "expired " + fmtMS(-v) + " ago"
	}
	return fmtMS(v) + " left"
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// parsePages parses the layout and the parts each page uses.
func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, p := range []string{"board", "card", "error"} {
		t, err := template.New(p).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("ui: templates of %s: %w", p, err)
		}
		pages[p] = t
	}
	return pages, nil
}
