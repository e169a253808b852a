package socketapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// newWithStore builds a server over store without a socket, its handler
// driven with made-up peers (see serveAs).
func newWithStore(t *testing.T, store board.Store) *Server {
	t.Helper()
	loop, err := heartbeat.New(heartbeat.Config{Store: store, Lease: func() time.Duration { return time.Minute }})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{
		Path: "unused", Store: store, Claims: loop, Prober: fixedProber{start: 1000}, Host: "agenthost",
		Lease:  func() time.Duration { return time.Minute },
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func openBoltStore(t *testing.T) *boltstore.Store {
	t.Helper()
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "b.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// spyStore records every malformed value a store verb is asked about: the
// socket must refuse those itself, whatever the store would do with them.
type spyStore struct {
	board.Store
	mu  sync.Mutex
	bad []string
}

// saw records v when a store would refuse it as a name of kind ("text":
// labels, titles and reasons, when not printable UTF-8 once trimmed, as a
// store trims labels).
func (s *spyStore) saw(verb, kind string, vs ...string) {
	for _, v := range vs {
		var err error
		switch kind {
		case "text":
			if v = strings.TrimSpace(v); !utf8.ValidString(v) || strings.IndexFunc(v, unicode.IsControl) >= 0 {
				err = fmt.Errorf("not printable UTF-8")
			}
		case "optional":
			if v != "" {
				err = board.ValidateName(kind, v)
			}
		default:
			err = board.ValidateName(kind, v)
		}
		if err != nil {
			s.mu.Lock()
			s.bad = append(s.bad, fmt.Sprintf("%s(%q)", verb, v))
			s.mu.Unlock()
		}
	}
}

func (s *spyStore) GetCard(ctx context.Context, p board.GetCardParams) (board.Card, error) {
	id := p.ID
	s.saw("GetCard", "name", id)
	return s.Store.GetCard(ctx, p)
}

func (s *spyStore) GetRun(ctx context.Context, p board.GetRunParams) (board.Run, error) {
	id := p.ID
	s.saw("GetRun", "name", id)
	return s.Store.GetRun(ctx, p)
}

func (s *spyStore) ListCards(ctx context.Context, f board.ListCardsParams) ([]board.Card, error) {
	s.saw("ListCards", "optional", f.State)
	return s.Store.ListCards(ctx, f)
}

func (s *spyStore) CreateCard(ctx context.Context, nc board.CreateCardParams) (board.Card, error) {
	s.saw("CreateCard", "name", nc.ID)
	s.saw("CreateCard", "optional", nc.State)
	s.saw("CreateCard", "text", append(append([]string{nc.Title}, nc.Labels...), nc.DependsOn...)...)
	return s.Store.CreateCard(ctx, nc)
}

func (s *spyStore) Claim(ctx context.Context, r board.ClaimParams) (board.Card, error) {
	s.saw("Claim", "name", r.Card)
	return s.Store.Claim(ctx, r)
}

func (s *spyStore) SetState(ctx context.Context, m board.MoveParams) error {
	s.saw("SetState", "name", m.Card, m.To)
	s.saw("SetState", "text", string(m.Reason))
	return s.Store.SetState(ctx, m)
}

func (s *spyStore) AdjustLabels(ctx context.Context, c board.AdjustLabelsParams) (board.Card, error) {
	s.saw("AdjustLabels", "name", c.Card)
	s.saw("AdjustLabels", "text", append(append([]string{}, c.Add...), c.Remove...)...)
	return s.Store.AdjustLabels(ctx, c)
}

func (s *spyStore) SetLabels(ctx context.Context, p board.SetLabelsParams) (board.Card, error) {
	card, labels := p.Card, p.Labels
	s.saw("SetLabels", "name", card)
	s.saw("SetLabels", "text", labels...)
	return s.Store.SetLabels(ctx, p)
}

func (s *spyStore) Release(ctx context.Context, p board.ReleaseParams) error {
	card := p.Card
	s.saw("Release", "name", card)
	return s.Store.Release(ctx, p)
}

// TestHostileNamesNeverReachTheStore sends names a store must refuse — not
// UTF-8, NUL and other controls, too long — in paths, queries and bodies of
// reads and writes. Each is refused with a 4xx JSON error, and the ones the
// store would refuse are refused by the socket itself: the store is never
// asked, so no store (nor the process boundary in front of one) can turn
// the caller's mistake into its own failure. The other places of each
// request name a card that does not exist, so nothing is written either.
func TestHostileNamesNeverReachTheStore(t *testing.T) {
	t.Parallel()
	spy := &spyStore{Store: openBoltStore(t)}
	s := newWithStore(t, spy)
	if _, err := spy.Store.CreateCard(t.Context(), board.CreateCardParams{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	operator := &peer{uid: uint32Self(), pid: 4242}

	names := []string{"%FF", "%C0", "%C0%AF", "%ED%A0%80", "a%00b", "%1B", "%C2%85", "%20lead", strings.Repeat("x", board.MaxIDBytes+1)}
	bodies := []string{"\xff", "\xc0\xaf", "\xed\xa0\x80", `\u0000`, `\u001b`, "\u0085", strings.Repeat("x", board.MaxIDBytes+1)}
	type request struct{ method, target, body string }
	var reqs []request
	for _, n := range names {
		reqs = append(reqs,
			request{"GET", "/v1/cards/" + n, ""},
			request{"GET", "/v1/runs/" + n, ""},
			request{"GET", "/v1/cards?state=" + n, ""},
			request{"PATCH", "/v1/runs/" + n, `{"status":"finished"}`},
			request{"PUT", "/v1/cards/" + n + "/state", `{"to":"ready"}`},
			request{"POST", "/v1/cards/" + n + "/reopen", `{"to":"ready"}`},
			request{"PATCH", "/v1/cards/" + n + "/labels", `{"add":["a"]}`},
			request{"PUT", "/v1/cards/" + n + "/labels", `{"labels":["a"]}`},
			request{"DELETE", "/v1/cards/" + n + "/claim", ""},
			request{"DELETE", "/v1/claims/" + n + "?epoch=1", ""},
			request{"PUT", "/v1/claims/" + n + "/last-run", `{"epoch":1,"run_id":"r"}`},
		)
	}
	for _, b := range bodies {
		q := `"` + b + `"`
		reqs = append(reqs,
			request{"POST", "/v1/claims", `{"card":` + q + `}`},
			request{"POST", "/v1/cards", `{"id":` + q + `}`},
			request{"POST", "/v1/cards", `{"id":"new","depends_on":["nope"],"title":` + q + `}`},
			request{"POST", "/v1/cards", `{"id":"new","depends_on":["nope"],"labels":[` + q + `]}`},
			request{"POST", "/v1/cards", `{"id":"new","depends_on":["nope"],"state":` + q + `}`},
			request{"POST", "/v1/cards", `{"id":"new","depends_on":[` + q + `]}`},
			request{"PUT", "/v1/cards/nope/state", `{"to":` + q + `}`},
			request{"PUT", "/v1/cards/nope/state", `{"to":"ready","reason":` + q + `}`},
			request{"PATCH", "/v1/cards/nope/labels", `{"add":[` + q + `]}`},
			request{"PUT", "/v1/cards/nope/labels", `{"labels":[` + q + `]}`},
			request{"PUT", "/v1/claims/c/state", `{"epoch":1,"to":` + q + `}`},
			request{"PUT", "/v1/claims/c/last-run", `{"epoch":1,"run_id":` + q + `}`},
			request{"PUT", "/v1/claims/c/gave-up", `{"epoch":1,"gave_up":{"reason":"x","run_id":` + q + `}}`},
			request{"POST", "/v1/claims/c/runs", `{"epoch":1,"id":` + q + `}`},
			request{"POST", "/v1/claims/c/runs", `{"epoch":1,"checkpoint":` + q + `}`},
			request{"PATCH", "/v1/runs/r", `{"failure_code":` + q + `}`},
			request{"POST", "/v1/board/states/rename", `{"from":` + q + `,"to":"x"}`},
			request{"POST", "/v1/board/labels/merge", `{"from":[` + q + `],"into":"x"}`},
			request{"POST", "/v1/board/labels/delete", `{"label":` + q + `}`},
		)
	}
	for _, rq := range reqs {
		rec := serveAs(s, operator, httptest.NewRequest(rq.method, rq.target, strings.NewReader(rq.body)))
		var eb apitype.ErrorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil {
			t.Errorf("%s %s %q: body %q is not a JSON error: %v", rq.method, rq.target, rq.body, rec.Body, err)
			continue
		}
		if rec.Code < 400 || rec.Code >= 500 {
			t.Errorf("%s %s %q: %d %s (%s), want a 4xx refusal", rq.method, rq.target, rq.body, rec.Code, eb.Code, eb.Error)
		}
	}
	if len(spy.bad) > 0 {
		t.Errorf("the store was asked about %d malformed names the socket should have refused: %s", len(spy.bad), strings.Join(spy.bad, ", "))
	}
	cards, err := spy.Store.ListCards(t.Context(), board.ListCardsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cards) != 1 {
		t.Errorf("cards after the hostile requests: %+v, want only c", cards)
	}
}

// TestBodyNotUTF8IsRefusedNotReplaced: encoding/json replaces bytes that
// are not UTF-8 with U+FFFD. A body carrying them is refused as it came,
// never decoded into a name the caller did not send and stored as that.
func TestBodyNotUTF8IsRefusedNotReplaced(t *testing.T) {
	t.Parallel()
	st := openBoltStore(t)
	s := newWithStore(t, st)
	operator := &peer{uid: uint32Self(), pid: 4242}
	for _, body := range []string{"{\"id\":\"\xff\"}", "{\"id\":\"new\",\"title\":\"caf\xc3\"}", "{\"id\":\"new\",\"labels\":[\"\xed\xa0\x80\"]}"} {
		rec := serveAs(s, operator, httptest.NewRequest("POST", "/v1/cards", strings.NewReader(body)))
		var eb apitype.ErrorBody
		_ = json.Unmarshal(rec.Body.Bytes(), &eb)
		if rec.Code != http.StatusBadRequest || eb.Code != apitype.CodeInvalidArgument || !strings.Contains(eb.Error, "not valid UTF-8") {
			t.Errorf("POST /v1/cards %q: %d %s %q, want 400 invalid_argument saying the body is not UTF-8", body, rec.Code, eb.Code, eb.Error)
		}
	}
	cards, err := st.ListCards(t.Context(), board.ListCardsParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cards {
		t.Errorf("card stored from a body that is not UTF-8: %+v", c)
	}
}

// unknownOutcomeStore fails every verb the read routes use with
// ErrOutcomeUnknown, as a store whose connection broke mid-call does, and
// one write, for contrast.
type unknownOutcomeStore struct{ board.Store }

// errBroke is worded as the store plugin words a call that timed out.
var errBroke = fmt.Errorf("store plugin: GetCard: interrupted by the caller while in flight (%w): %w: the write may or may not have landed",
	context.DeadlineExceeded, board.ErrOutcomeUnknown)

func (unknownOutcomeStore) GetCard(context.Context, board.GetCardParams) (board.Card, error) {
	return board.Card{}, errBroke
}
func (unknownOutcomeStore) GetRun(context.Context, board.GetRunParams) (board.Run, error) {
	return board.Run{}, errBroke
}
func (unknownOutcomeStore) ListCards(context.Context, board.ListCardsParams) ([]board.Card, error) {
	return nil, errBroke
}
func (unknownOutcomeStore) Events(context.Context, board.EventsParams) ([]board.Event, error) {
	return nil, errBroke
}
func (unknownOutcomeStore) LoadBoard(context.Context) (board.Board, error) {
	return board.Board{}, errBroke
}
func (unknownOutcomeStore) SetState(context.Context, board.MoveParams) error { return errBroke }

// TestReadNeverAnswersOutcomeUnknown: outcome_unknown tells a caller a write
// may or may not have landed. A read wrote nothing, so a store that failed
// to answer one is 503 unavailable (try again), whatever the store called
// its failure; a write keeps outcome_unknown.
func TestReadNeverAnswersOutcomeUnknown(t *testing.T) {
	t.Parallel()
	s := newWithStore(t, unknownOutcomeStore{Store: openBoltStore(t)})
	operator := &peer{uid: uint32Self(), pid: 4242}
	for _, target := range []string{"/v1/cards/c", "/v1/runs/r", "/v1/cards", "/v1/cards?state=ready", "/v1/events", "/v1/board"} {
		rec := serveAs(s, operator, httptest.NewRequest("GET", target, nil))
		var eb apitype.ErrorBody
		_ = json.Unmarshal(rec.Body.Bytes(), &eb)
		if rec.Code != http.StatusServiceUnavailable || eb.Code != apitype.CodeUnavailable {
			t.Errorf("GET %s: %d %s (%s), want 503 unavailable", target, rec.Code, eb.Code, eb.Error)
		}
		// Nor does its message speak of a write.
		if !strings.Contains(eb.Error, "the store did not answer this read in time") || strings.Contains(eb.Error, "landed") || strings.Contains(eb.Error, "outcome unknown") {
			t.Errorf("GET %s: %q, want it to say the store did not answer the read in time, and nothing of a write", target, eb.Error)
		}
	}
	rec := serveAs(s, operator, httptest.NewRequest("PUT", "/v1/cards/c/state", strings.NewReader(`{"to":"ready"}`)))
	var eb apitype.ErrorBody
	_ = json.Unmarshal(rec.Body.Bytes(), &eb)
	if eb.Code != apitype.CodeOutcomeUnknown {
		t.Errorf("PUT /v1/cards/c/state: %d %s, want outcome_unknown: a write may have landed", rec.Code, eb.Code)
	}
}
