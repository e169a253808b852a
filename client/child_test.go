package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/internal/waitbound"
)

// The test binary re-executes itself as a second worker process: a
// different pid, so a different marker, as far as the kernel is concerned.
const childEnv = "LEASEKEEPER_CLIENT_TEST_CHILD"

func TestMain(m *testing.M) {
	if action := os.Getenv(childEnv); action != "" {
		os.Exit(runChild(action))
	}
	waitbound.Widen()
	os.Exit(m.Run())
}

// childResult is what the child prints on stdout.
type childResult struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Error  string `json:"error"`
	Holder string `json:"holder,omitempty"`
	Marker string `json:"marker,omitempty"`
	Epoch  int64  `json:"epoch,omitempty"`
}

func runChild(action string) int {
	socket := os.Getenv(apitype.SocketEnv)
	card, epoch := os.Getenv("LK_CARD"), os.Getenv("LK_EPOCH")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var res childResult
	switch action {
	case "claim", "claim-hold":
		var c client.Client
		cl, err := c.Claim(ctx, card)
		if err == nil {
			res.Marker, res.Epoch = cl.Token().Marker, cl.Token().Epoch
		} else {
			res.Error = err.Error()
			var ae *apitype.Error
			if errors.As(err, &ae) {
				res.Status, res.Code = ae.Status, string(ae.Body.Code)
			}
			if ce, ok := board.AsClaimConflict(err); ok {
				res.Holder = ce.Holder
			}
		}
	default:
		// Raw owner writes naming someone else's claim by its epoch.
		routes := map[string][2]string{
			"release":   {"DELETE", "/v1/claims/" + card + "?epoch=" + epoch},
			"state":     {"PUT", "/v1/claims/" + card + "/state"},
			"last-run":  {"PUT", "/v1/claims/" + card + "/last-run"},
			"gave-up":   {"PUT", "/v1/claims/" + card + "/gave-up"},
			"start-run": {"POST", "/v1/claims/" + card + "/runs"},
		}
		rt, ok := routes[action]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown child action %q\n", action)
			return 2
		}
		body := fmt.Sprintf(`{"epoch":%s,"to":"done","run_id":"r1","gave_up":null}`, epoch)
		switch action {
		case "release":
			body = ""
		case "state":
			body = fmt.Sprintf(`{"epoch":%s,"to":"done"}`, epoch)
		case "last-run":
			body = fmt.Sprintf(`{"epoch":%s,"run_id":"r1"}`, epoch)
		case "gave-up":
			body = fmt.Sprintf(`{"epoch":%s,"gave_up":null}`, epoch)
		case "start-run":
			body = fmt.Sprintf(`{"epoch":%s}`, epoch)
		}
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}}}
		req, _ := http.NewRequestWithContext(ctx, rt[0], "http://leasekeeper"+rt[1], strings.NewReader(body))
		resp, err := hc.Do(req)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res.Status = resp.StatusCode
		var eb apitype.ErrorBody
		if json.Unmarshal(b, &eb) == nil {
			res.Code, res.Error = string(eb.Code), eb.Error
		}
	}
	json.NewEncoder(os.Stdout).Encode(res)
	if action == "claim-hold" {
		// Hold the claim until the test kills us or closes our stdin.
		_, _ = io.Copy(io.Discard, os.Stdin)
	}
	return 0
}

// child runs one action in a child process and returns what it saw.
func child(t *testing.T, socket, action, card string, epoch int64) childResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+action, apitype.SocketEnv+"="+socket,
		"LK_CARD="+card, fmt.Sprintf("LK_EPOCH=%d", epoch))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child %s: %v", action, err)
	}
	var res childResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("child %s output %q: %v", action, out, err)
	}
	return res
}
