package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawGet sends GET path over the agent's socket and returns the status and
// the body exactly as the agent wrote it.
func rawGet(t *testing.T, socket, path string) (int, string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://leasekeeper" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestE2EAPIAsDocumented checks what the socket sends against docs/API.md
// on the points where they used to differ: an out-of-range limit is a bad
// query parameter, error bodies are not HTML-escaped, and unset times are
// absent rather than year 1.
func TestE2EAPIAsDocumented(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.Start()
	e.MustRun("card", "create", "free")

	for _, path := range []string{"/v1/cards?limit=-1", "/v1/cards?limit=10001", "/v1/events?limit=-1", "/v1/events?limit=0", "/v1/runs?limit=-1", "/v1/runs?limit=10001"} {
		status, body := rawGet(t, e.Socket, path)
		var eb struct{ Code string }
		if err := json.Unmarshal([]byte(body), &eb); err != nil || status != http.StatusBadRequest || eb.Code != "bad_request" {
			t.Errorf("GET %s = %d %s, want 400 bad_request (a bad query parameter)", path, status, body)
		}
	}

	status, body := rawGet(t, e.Socket, "/v1/cards/a%3Eb%3Cc%26d")
	if status != http.StatusNotFound || !strings.Contains(body, `a>b<c&d`) || strings.Contains(body, `\u003e`) {
		t.Errorf("GET a card named a>b<c&d = %d %s, want 404 naming it unescaped", status, body)
	}

	status, body = rawGet(t, e.Socket, "/v1/cards/free")
	if status != http.StatusOK {
		t.Fatalf("GET /v1/cards/free = %d %s", status, body)
	}
	if strings.Contains(body, "0001-01-01") || strings.Contains(body, `"claimed_at"`) || strings.Contains(body, `"claim_lease_until"`) {
		t.Errorf("a free card carries unset times: %s", body)
	}
	if !strings.Contains(body, `"created_at"`) {
		t.Errorf("a card without created_at: %s", body)
	}

	// draining is a documented status field: present while false too.
	status, body = rawGet(t, e.Socket, "/v1/status")
	if status != http.StatusOK || !strings.Contains(body, `"draining":false`) {
		t.Errorf("GET /v1/status = %d %s, want draining:false", status, body)
	}

	// A position below what retention pruned is 410 events_pruned, never
	// a page past the gap (API.md, DESIGN.md#retention). The prune keeps
	// what the agent's effects layer has not applied, so it is repeated
	// until that layer has caught up.
	e.MustRun("card", "create", "second")
	e.WaitFor(20*time.Second, "a prune past seq 1", func() bool {
		e.MustRun("prune", "--older-than", "1ms")
		status, body = rawGet(t, e.Socket, "/v1/events?after=1")
		return status != http.StatusOK
	})
	var eb struct{ Code, Error string }
	if err := json.Unmarshal([]byte(body), &eb); err != nil || status != http.StatusGone || eb.Code != "events_pruned" || !strings.Contains(eb.Error, "pruned through") {
		t.Errorf("GET /v1/events?after=1 once pruned = %d %s, want 410 events_pruned naming where the log was cut", status, body)
	}
	if status, body = rawGet(t, e.Socket, "/v1/events?after=0"); status != http.StatusOK {
		t.Errorf("GET /v1/events?after=0 once pruned = %d %s, want 200: what the log keeps", status, body)
	}
}
