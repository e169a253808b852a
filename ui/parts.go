package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"hash/fnv"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

// A page's live region is made of parts: the health line, the
// Needs-attention lane, each column, the watchdog panel; a card's fields,
// timeline, runs and events. Each part is rendered on its own and named by
// a hash of its HTML. The page's update (GET /board/parts, GET
// /cards/{id}/parts) names the hashes the page holds (have=h1.h2...) and
// the answer carries every part's hash but the HTML only of the parts that
// changed: the script replaces those elements and nothing else, so the
// columns' scroller, its scroll position and the focus stay where they are,
// and an update of a 10,000-card board is the column that changed, not the
// board (docs/OPERATIONS.md, "Large boards").
//
// Nothing in a part depends on the moment it is rendered unless the board
// changed: a lease is rendered as the instant it ends (data-lease-until)
// and the script counts down against the server's clock (the update's
// "now"), so a column whose cards did not change keeps its hash.

// partSpec is a part to render: its key, the element of the page it goes
// in (by id), and the template that renders it with data.
type partSpec struct {
	Key, In, Tmpl string
	Data          any
}

// part is a rendered part. HTML is the element the page holds: a wrapper
// that names the part and its hash around what the template rendered.
type part struct {
	Key  string        `json:"k"`
	In   string        `json:"in"`
	Hash string        `json:"h"`
	HTML template.HTML `json:"html,omitempty"`
}

// partSet is the parts of a full render, by the element they go in.
type partSet map[string][]part

// parts renders each spec of page, leaving out the HTML of the parts whose
// hash is in have.
func (s *Server) parts(page string, specs []partSpec, have map[string]bool) ([]part, error) {
	out := make([]part, 0, len(specs))
	var buf bytes.Buffer
	for _, sp := range specs {
		buf.Reset()
		if err := s.pages[page].ExecuteTemplate(&buf, sp.Tmpl, sp.Data); err != nil {
			s.cfg.Logger.Error("render", "page", page, "template", sp.Tmpl, "err", err)
			return nil, errRender
		}
		h := fnv.New64a()
		h.Write([]byte(sp.Key))
		h.Write([]byte{0})
		h.Write(buf.Bytes())
		p := part{Key: sp.Key, In: sp.In, Hash: strconv.FormatUint(h.Sum64(), 36)}
		if !have[p.Hash] {
			// The template's output is html/template's: escaped already.
			// The key and the hash are escaped here (a key holds a state
			// name).
			p.HTML = template.HTML(`<div class="part" data-part="` + template.HTMLEscapeString(p.Key) +
				`" data-h="` + p.Hash + `">` + buf.String() + `</div>`)
		}
		out = append(out, p)
	}
	return out, nil
}

var errRender = &statusError{code: http.StatusInternalServerError, msg: "internal error rendering the page"}

// fullParts renders every part of page, grouped by the element they go
// in, for a full render.
func (s *Server) fullParts(page string, specs []partSpec) (partSet, error) {
	ps, err := s.parts(page, specs, nil)
	if err != nil {
		return nil, err
	}
	out := partSet{}
	for _, p := range ps {
		out[p.In] = append(out[p.In], p)
	}
	return out, nil
}

// haveOf is the hashes the page says it holds.
func haveOf(r *http.Request) map[string]bool {
	have := map[string]bool{}
	for _, v := range r.URL.Query()["have"] {
		for _, h := range strings.Split(v, ".") {
			if h != "" && len(have) < 10000 {
				have[h] = true
			}
		}
	}
	return have
}

// partsAnswer is the update the page applies: the server's clock (lease
// countdowns count against it) and every part in page order.
type partsAnswer struct {
	Now   int64  `json:"now"`
	Parts []part `json:"parts,omitempty"`
	// Error, when the update could not be read: Down says the agent is
	// unreachable (the page keeps what it shows and says so).
	Error string    `json:"error,omitempty"`
	Down  *downView `json:"down,omitempty"`
	Code  int       `json:"code,omitempty"`
}

func (s *Server) renderParts(w http.ResponseWriter, now time.Time, ps []part, err error) {
	if err != nil {
		s.renderPartsError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, partsAnswer{Now: now.UnixMilli(), Parts: ps})
}

func (s *Server) renderPartsError(w http.ResponseWriter, err error) {
	a := partsAnswer{Now: s.now().UnixMilli(), Error: err.Error(), Code: errorCode(err)}
	if isUnreachable(err) {
		a.Down = s.down(err)
		a.Error = a.Down.Message
	}
	writeJSON(w, a.Code, a)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the HTML travels as a JSON string, not into HTML
	if err := enc.Encode(v); err != nil {
		http.Error(w, "internal error encoding the update", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// downView says that the agent cannot be reached, in words: the board
// shows it instead of the transport's error.
type downView struct {
	Message string `json:"message"`
	// Detail is the error itself, for the curious.
	Detail string `json:"detail"`
}

// isUnreachable says whether err is the agent not answering at all (no
// socket, nothing listening, the connection dropped), as opposed to an
// answer that is an error.
func isUnreachable(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue)
}

func (s *Server) down(err error) *downView {
	return &downView{Message: agentDown(s.cfg.Client, err), Detail: err.Error()}
}

// agentDown words why the agent at c cannot be read.
func agentDown(c *client.Client, err error) string {
	sock := c.SocketPath()
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
		return "The agent is not running: nothing answers on its socket " + sock +
			". The board shows what it last read and comes back by itself when the agent does."
	case errors.Is(err, syscall.EACCES):
		return "The agent's socket " + sock + " refuses this user: leasekeeper ui reads the board as the user who started it."
	}
	return "Lost the link to the agent at " + sock + ". The board shows what it last read and comes back by itself when the agent does."
}

func errorCode(err error) int {
	var se *statusError
	switch {
	case errors.Is(err, board.ErrNotFound):
		return http.StatusNotFound
	case errors.As(err, &se):
		return se.code
	}
	return http.StatusBadGateway
}

// partSpecs are the board's parts: the health line, the lane and the count
// above the columns, each column in the columns' scroller, the watchdog
// below.
func (v *boardView) partSpecs() []partSpec {
	specs := []partSpec{
		{Key: "health", In: "slot-top", Tmpl: "health", Data: v.Health},
		{Key: "attention", In: "slot-top", Tmpl: "attention", Data: v},
		{Key: "count", In: "slot-top", Tmpl: "count", Data: v},
	}
	for _, c := range v.Columns {
		specs = append(specs, partSpec{Key: "col:" + c.State.Name, In: "slot-columns", Tmpl: "column", Data: c})
	}
	return append(specs,
		partSpec{Key: "charts", In: "slot-bottom", Tmpl: "charts", Data: v.Charts},
		partSpec{Key: "watchdog", In: "slot-bottom", Tmpl: "watchdog", Data: v})
}

// partSpecs are a card page's parts.
func (p *cardPage) partSpecs() []partSpec {
	return []partSpec{
		{Key: "health", In: "slot-top", Tmpl: "health", Data: p.Health},
		{Key: "card", In: "slot-card", Tmpl: "cardfields", Data: p},
		{Key: "timeline", In: "slot-card", Tmpl: "timeline", Data: p},
		{Key: "runs", In: "slot-card", Tmpl: "runs", Data: p},
		{Key: "events", In: "slot-card", Tmpl: "events", Data: p},
	}
}
