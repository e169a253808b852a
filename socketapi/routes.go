package socketapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
)

// perm is the permission class a route demands before its handler runs.
// Handlers check ownership of the specific claim or run themselves.
type perm int

const (
	// permRead: any connected peer with kernel credentials. The socket's
	// mode (0660) already limits who can connect.
	permRead perm = iota
	// permWorker: a caller resolved to a worker marker.
	permWorker
	// permOperator: a caller whose uid is an allowed operator.
	permOperator
)

// caller is who the middleware resolved for the route's permission class.
type caller struct {
	worker worker // permWorker
	actor  string // permOperator: "uid:N"
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, c caller) error

type route struct {
	method  string
	pattern string
	perm    perm
	h       handlerFunc
}

// table is every route of the API, in one place. The package documentation
// describes each one; keep the two in step.
func (s *Server) table() []route {
	return append(s.coreRoutes(), s.adminRoutes()...)
}

// Route names one route of the API: its method and its pattern, with path
// wildcards in braces as net/http.ServeMux spells them ("/v1/cards/{id}").
type Route struct {
	Method, Pattern string
}

// Routes lists every route a Server serves, in table order. Tests that must
// cover the whole API (hostile input, the documentation) range over it, so
// a route added to the table cannot be left out of them.
func Routes() []Route {
	var s Server // only the table is read; no handler runs
	var out []Route
	for _, rt := range s.table() {
		out = append(out, Route{Method: rt.method, Pattern: rt.pattern})
	}
	return out
}

func (s *Server) coreRoutes() []route {
	return []route{
		// Worker routes: the marker is the caller's own, from the kernel.
		{"POST", "/v1/claims", permWorker, s.handleClaim},
		{"POST", "/v1/starts", permWorker, s.handleStart},
		{"POST", "/v1/claims/{card}/finish", permWorker, s.handleFinish},
		{"DELETE", "/v1/claims/{card}", permWorker, s.handleRelease},
		{"PUT", "/v1/claims/{card}/state", permWorker, s.handleOwnedState},
		{"PUT", "/v1/claims/{card}/last-run", permWorker, s.handleOwnedLastRun},
		{"PUT", "/v1/claims/{card}/awaiting-input", permWorker, s.handleOwnedAwaitingInput},
		{"PUT", "/v1/claims/{card}/gave-up", permWorker, s.handleOwnedGaveUp},
		{"POST", "/v1/claims/{card}/runs", permWorker, s.handleStartRun},
		{"PATCH", "/v1/runs/{id}", permWorker, s.handleUpdateRun},
		{"POST", "/v1/keepalive", permWorker, s.handleKeepalive},
		{"GET", "/v1/watch", permWorker, s.handleWatch},

		// Reads: any connected peer.
		{"GET", "/v1/cards", permRead, s.handleListCards},
		{"GET", "/v1/cards/{id}", permRead, s.handleGetCard},
		{"GET", "/v1/runs", permRead, s.handleListRuns}, // runs.go
		{"GET", "/v1/runs/{id}", permRead, s.handleGetRun},
		{"GET", "/v1/status", permRead, s.handleStatus},
		{"GET", "/v1/board", permRead, s.handleBoard},
		{"GET", "/v1/events", permRead, s.handleEvents},
		{"GET", "/v1/events/head", permRead, s.handleEventsHead},

		// Operator routes.
		{"POST", "/v1/cards", permOperator, s.handleCreateCard},
		{"PUT", "/v1/cards/{id}/state", permOperator, s.handleMoveCard},
		{"POST", "/v1/cards/{id}/reopen", permOperator, s.handleReopenCard},
		{"PATCH", "/v1/cards/{id}/labels", permOperator, s.handleAdjustLabels},
		{"PUT", "/v1/cards/{id}/labels", permOperator, s.handleSetLabels},
		{"DELETE", "/v1/cards/{id}/claim", permOperator, s.handleForceRelease},
		{"DELETE", "/v1/cards/{id}", permOperator, s.handleDeleteCard},
		{"POST", "/v1/prune", permOperator, s.handlePrune},
		{"POST", "/v1/reaper/pass", permOperator, s.handleReaperPass},
	}
}

// routes builds the handler. Patterns are registered without a method and
// dispatched here, so an unknown method is a JSON 405 like every other error.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	byPattern := map[string][]route{}
	var order []string
	for _, rt := range s.table() {
		if _, ok := byPattern[rt.pattern]; !ok {
			order = append(order, rt.pattern)
		}
		byPattern[rt.pattern] = append(byPattern[rt.pattern], rt)
	}
	for _, pattern := range order {
		mux.Handle(pattern, s.dispatch(byPattern[pattern]))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, fmt.Errorf("%w: no route %s %s", board.ErrNotFound, r.Method, r.URL.Path))
	})
	return s.guard(mux)
}

// guard refuses browser-originated requests before any routing: a web page
// can make a browser talk to a local socket through a forwarding proxy, and
// such requests always carry Origin or Referer; no legitimate client does.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Origin") != "" || r.Header.Get("Referer") != "" {
			s.writeError(w, r, fmt.Errorf("%w: requests carrying Origin or Referer are refused", apitype.ErrForbidden))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) dispatch(routes []route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := slices.IndexFunc(routes, func(rt route) bool { return rt.method == r.Method })
		if i < 0 {
			var allow []string
			for _, rt := range routes {
				allow = append(allow, rt.method)
			}
			w.Header().Set("Allow", strings.Join(allow, ", "))
			s.writeErrorStatus(w, r, http.StatusMethodNotAllowed,
				fmt.Errorf("%w: method %s not allowed on %s (allowed: %s)", apitype.ErrBadRequest, r.Method, r.URL.Path, strings.Join(allow, ", ")))
			return
		}
		rt := routes[i]
		var c caller
		var err error
		switch rt.perm {
		case permRead:
			_, err = peerOf(r)
		case permWorker:
			c.worker, err = s.workerOf(r)
		case permOperator:
			c.actor, err = s.operatorOf(r)
		}
		if err == nil {
			err = rt.h(w, r, c)
		}
		if err != nil && r.Method == http.MethodGet && errors.Is(err, board.ErrOutcomeUnknown) {
			// outcome_unknown means a write may or may not have landed;
			// a read wrote nothing, so it is only a store that did not
			// answer. Say that, whatever the store called it.
			err = fmt.Errorf("%w: %s", apitype.ErrUnavailable, unansweredRead(err))
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if r.Method != http.MethodGet {
			s.wrote.fire()
			if s.cfg.AfterWrite != nil {
				s.cfg.AfterWrite()
			}
		}
	})
}

// unansweredRead words a read the store left unanswered (an error wrapping
// board.ErrOutcomeUnknown): that it did not answer, in time when a
// deadline ended the wait, with the store's account of the call up to
// where it turns to the fate of a write — a read wrote nothing.
func unansweredRead(err error) string {
	msg := "the store did not answer this read"
	if errors.Is(err, context.DeadlineExceeded) {
		msg += " in time"
	}
	if detail, _, found := strings.Cut(err.Error(), ": "+board.ErrOutcomeUnknown.Error()); found && detail != "" {
		msg += " (" + detail + ")"
	}
	return msg
}

// jsonContentType is the Content-Type of every JSON answer, one value
// shared by all (net/http copies the handler's header when it writes it).
var jsonContentType = []string{"application/json"}

// writeJSON sends v with status.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // a body is JSON for programs, not HTML: "<" stays "<"
	return enc.Encode(v)
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	s.writeErrorStatus(w, r, 0, err)
}

func (s *Server) writeErrorStatus(w http.ResponseWriter, r *http.Request, status int, err error) {
	st, body := apitype.ErrorFor(err)
	if status == 0 {
		status = st
	}
	if status >= 500 {
		s.cfg.Logger.Error("socket api request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	} else {
		s.cfg.Logger.Debug("socket api request refused", "method", r.Method, "path", r.URL.Path, "code", body.Code, "err", err)
	}
	_ = writeJSON(w, status, body)
}

// decode reads a JSON body strictly: capped in size, valid UTF-8, unknown
// fields and trailing data refused, and every name in it checked
// (checkBody). An empty body decodes to the zero value, so routes whose
// fields are all optional accept it; validation catches the rest. The
// whole body is read (within the cap) before it is parsed, so a body over
// the cap is 413 whatever its first bytes are, chunked or not.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	if err := decodeStrict(r.Body, v); err != nil {
		return err
	}
	return checkBody(r, v)
}

func decodeStrict(body io.Reader, v any) error {
	buf := bodyBufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			buf.Reset()
			bodyBufs.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(body); err != nil {
		return classifyDecode(err)
	}
	raw := buf.Bytes()
	if err := checkUTF8(raw); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return classifyDecode(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil {
			return fmt.Errorf("%w: trailing data after the JSON body", apitype.ErrBadRequest)
		}
		return classifyDecode(err)
	}
	return nil
}

// bodyBufs holds the buffers request bodies are read into; decoding
// copies every string out of them. One grown past maxPooledBody is left
// to the collector.
var bodyBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBody = 64 << 10

func classifyDecode(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fmt.Errorf("%w: body over %d bytes", apitype.ErrTooLarge, mbe.Limit)
	}
	return fmt.Errorf("%w: decoding JSON body: %v", apitype.ErrBadRequest, err)
}

// queryInt parses an optional integer query parameter.
func queryInt(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: query parameter %s=%q is not an integer", apitype.ErrBadRequest, name, v)
	}
	return n, nil
}

// queryBool parses an optional boolean query parameter; a bare ?name counts
// as true.
func queryBool(r *http.Request, name string) (bool, error) {
	q := r.URL.Query()
	if !q.Has(name) {
		return false, nil
	}
	v := q.Get(name)
	if v == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: query parameter %s=%q is not a boolean", apitype.ErrBadRequest, name, v)
	}
	return b, nil
}
