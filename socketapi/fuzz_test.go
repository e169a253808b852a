package socketapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/pidprobe/pidprobetest"
)

// FuzzDecodeStrict: whatever the bytes, the decoder either fills the value
// or refuses it: invalid_argument for a body that is not UTF-8 (never a
// value with U+FFFD in place of the bytes), bad_request for anything else
// it cannot read; it never panics.
func FuzzDecodeStrict(f *testing.F) {
	for _, seed := range []string{
		`{"card":"c1"}`, `{"next":true}`, `{"epoch":3,"to":"done","from":"in_progress","reason":"run_finished"}`,
		`{"epoch":1,"gave_up":{"reason":"x","at":"2026-01-01T00:00:00Z"}}`, `{"status":"finished","if_status":"running"}`,
		`{"card":"c1"} trailing`, `{"card":"c1","unknown":1}`, `{`, `[]`, `null`, "\x00\xff", ``, `{"labels":null}`,
		`{"epoch":9223372036854775808}`, `{"card":"\ud800"}`,
		"{\"card\":\"\xff\"}", "{\"card\":\"c\xc0\xaf\"}", "{\"labels\":[\"\xed\xa0\x80\"]}", "{\"card\":\"\xc3\"}",
	} {
		f.Add([]byte(seed))
	}
	targets := []func() any{
		func() any { return new(apitype.ClaimRequest) },
		func() any { return new(apitype.SetStateRequest) },
		func() any { return new(apitype.SetGaveUpRequest) },
		func() any { return new(apitype.StartRunRequest) },
		func() any { return new(apitype.UpdateRunRequest) },
		func() any { return new(apitype.CreateCardRequest) },
		func() any { return new(apitype.AdjustLabelsRequest) },
		func() any { return new(apitype.SetLabelsRequest) },
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, mk := range targets {
			v := mk()
			err := decodeStrict(bytes.NewReader(body), v)
			switch {
			case !utf8.Valid(body) && !errors.Is(err, board.ErrInvalidArgument):
				t.Fatalf("decode %T of %q, not UTF-8: %v, want invalid_argument", v, body, err)
			case utf8.Valid(body) && err != nil && !errors.Is(err, apitype.ErrBadRequest):
				t.Fatalf("decode %T of %q: error %v is not bad_request", v, body, err)
			}
			if err == nil && len(bytes.TrimSpace(body)) > 0 && !json.Valid(body) {
				t.Fatalf("decode %T accepted invalid JSON %q", v, body)
			}
		}
	})
}

var fuzzRoutes = []struct{ method, path string }{
	{"POST", "/v1/claims"},
	{"PUT", "/v1/claims/c/state"},
	{"PUT", "/v1/claims/c/last-run"},
	{"PUT", "/v1/claims/c/awaiting-input"},
	{"PUT", "/v1/claims/c/gave-up"},
	{"POST", "/v1/claims/c/runs"},
	{"PATCH", "/v1/runs/r"},
	{"POST", "/v1/keepalive"},
	{"POST", "/v1/cards"},
	{"PUT", "/v1/cards/c/state"},
	{"POST", "/v1/cards/c/reopen"},
	{"PATCH", "/v1/cards/c/labels"},
	{"PUT", "/v1/cards/c/labels"},
}

// FuzzRequests drives whole requests through the handler (the same one the
// socket serves) as an operator worker process: whatever the body, the
// answer is a JSON 2xx or 4xx, never a 5xx, and the server keeps answering.
func FuzzRequests(f *testing.F) {
	for i := range fuzzRoutes {
		for _, seed := range []string{`{}`, `{"card":"c"}`, `{"epoch":1,"to":"done"}`, `{"id":"n","depends_on":["c"]}`,
			`{"add":["a"," a ",""],"remove":["a"]}`, `{"labels":["\u0000"]}`, `{"to":"nope"}`, `garbage`, `{"epoch":-1}`} {
			f.Add(uint8(i), []byte(seed))
		}
	}
	s, st := newInternal(f, apitype.LivenessPID)
	if _, err := st.CreateCard(context.Background(), board.CreateCardParams{ID: "c"}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		p := &peer{uid: uint32Self(), pid: 4242, ident: pidprobetest.ID(1000)}
		rec := serveAs(s, p, httptest.NewRequest(rt.method, rt.path, bytes.NewReader(body)))
		if rec.Code >= 500 {
			t.Fatalf("%s %s with %q: status %d (%s)", rt.method, rt.path, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 {
			var eb apitype.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Code == "" {
				t.Fatalf("%s %s: error body %q is not a JSON error (%v)", rt.method, rt.path, rec.Body, err)
			}
		}
		rec = serveAs(s, p, httptest.NewRequest("GET", "/v1/cards/c", strings.NewReader("")))
		if rec.Code != 200 {
			t.Fatalf("server stopped answering after %s %s %q: %d", rt.method, rt.path, body, rec.Code)
		}
	})
}
