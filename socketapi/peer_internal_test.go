package socketapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	"github.com/leasekeeper/leasekeeper/pidprobe/pidprobetest"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

type fixedProber struct{ start int64 }

func (p fixedProber) Identify(context.Context, int) (pidprobe.Identity, error) {
	return pidprobetest.ID(p.start), nil
}

// newInternal builds a server without a socket and drives its handler with
// peers the test makes up: the kernel cannot be made to report pid 0 from
// a test, so this is where the foreign-namespace rules are pinned.
func newInternal(t testing.TB, liveness string) (*Server, board.Store) {
	t.Helper()
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "b.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	loop, err := heartbeat.New(heartbeat.Config{Store: st, Lease: func() time.Duration { return time.Minute }})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{
		Path: "unused", Store: st, Claims: loop, Prober: fixedProber{start: 1000}, Host: "agenthost",
		Lease: func() time.Duration { return time.Minute }, Liveness: func() string { return liveness },
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, st
}

func serveAs(s *Server, p *peer, req *http.Request) *httptest.ResponseRecorder {
	req = req.WithContext(context.WithValue(req.Context(), peerKey{}, p))
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	return rec
}

func TestForeignPIDNamespace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		liveness   string
		header     string
		wantStatus int
		wantText   string // in the error, or the claim marker on success
	}{
		{"pid mode names the fix", apitype.LivenessPID, "podhost-7", 403, "shareProcessNamespace: true"},
		{"pid mode names keepalive", apitype.LivenessPID, "", 403, "liveness: keepalive"},
		{"keepalive without header", apitype.LivenessKeepalive, "", 401, apitype.WorkerHeader},
		{"keepalive bad header", apitype.LivenessKeepalive, "nodash", 400, "malformed marker"},
		{"keepalive recovery header", apitype.LivenessKeepalive, "reaper:podhost-7", 403, "recovery"},
		{"keepalive self-declared", apitype.LivenessKeepalive, "podhost-7", 200, "podhost" + ForeignHostSuffix + "-7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, st := newInternal(t, tc.liveness)
			if _, err := st.CreateCard(context.Background(), board.CreateCardParams{ID: "c"}); err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest("POST", "/v1/claims", strings.NewReader(`{"card":"c"}`))
			if tc.header != "" {
				req.Header.Set(apitype.WorkerHeader, tc.header)
			}
			rec := serveAs(s, &peer{uid: 1000, pid: 0}, req)
			if rec.Code != tc.wantStatus {
				t.Fatalf("status = %d, want %d (%s)", rec.Code, tc.wantStatus, rec.Body)
			}
			if !strings.Contains(rec.Body.String(), tc.wantText) {
				t.Errorf("body %s does not contain %q", rec.Body, tc.wantText)
			}
		})
	}
}

func TestKernelIdentityBeatsHeader(t *testing.T) {
	t.Parallel()
	s, st := newInternal(t, apitype.LivenessKeepalive)
	if _, err := st.CreateCard(context.Background(), board.CreateCardParams{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/v1/claims", strings.NewReader(`{"card":"c"}`))
	req.Header.Set(apitype.WorkerHeader, "otherhost-99")
	rec := serveAs(s, &peer{uid: 1000, pid: 4242, ident: pidprobetest.ID(1000)}, req)
	if rec.Code != 200 {
		t.Fatalf("claim: %d %s", rec.Code, rec.Body)
	}
	var cr apitype.ClaimResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &cr); err != nil {
		t.Fatal(err)
	}
	if got, want := cr.Token.Marker, "agenthost-4242"; got != want {
		t.Errorf("marker = %q, want %q (the kernel's pid, not the header's)", got, want)
	}
}

func TestOperatorUIDs(t *testing.T) {
	t.Parallel()
	s, _ := newInternal(t, apitype.LivenessPID)
	s.cfg.Operators = func() []uint32 { return []uint32{0, 500} }
	for _, tc := range []struct {
		name       string
		uid        uint32
		wantStatus int
	}{
		{"allowed uid", 500, http.StatusCreated},
		{"root", 0, http.StatusCreated},
		{"other uid", 501, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "/v1/cards", strings.NewReader(`{"id":"op-`+tc.name+`"}`))
			rec := serveAs(s, &peer{uid: tc.uid, pid: 4242, ident: pidprobetest.ID(1000)}, req)
			if rec.Code != tc.wantStatus {
				t.Errorf("create as uid %d: status %d, want %d (%s)", tc.uid, rec.Code, tc.wantStatus, rec.Body)
			}
			// Reads stay open to every peer.
			rec = serveAs(s, &peer{uid: tc.uid, pid: 4242, ident: pidprobetest.ID(1000)}, httptest.NewRequest("GET", "/v1/cards", nil))
			if rec.Code != 200 {
				t.Errorf("list as uid %d: status %d, want 200", tc.uid, rec.Code)
			}
		})
	}
}

func TestRingResume(t *testing.T) {
	t.Parallel()
	r := newRing(4)
	for i := range 6 {
		r.push(apitype.Frame{Type: apitype.FrameLaunch, Card: string(rune('a' + i))})
	}
	for _, tc := range []struct {
		name       string
		after      int64
		wantFirst  int64
		wantCount  int
		wantMissed bool
	}{
		{"within buffer", 3, 4, 3, false},
		{"at head", 6, 0, 0, false},
		{"exactly oldest-1", 2, 3, 4, false},
		{"fell out", 1, 3, 4, true},
		{"ahead of head (agent restarted)", 10, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frames, head, missed, _ := r.since(tc.after)
			if head != 6 || missed != tc.wantMissed || len(frames) != tc.wantCount {
				t.Fatalf("since(%d) = %d frames, head %d, missed %v; want %d frames, head 6, missed %v",
					tc.after, len(frames), head, missed, tc.wantCount, tc.wantMissed)
			}
			if len(frames) > 0 && frames[0].Seq != tc.wantFirst {
				t.Errorf("first seq = %d, want %d", frames[0].Seq, tc.wantFirst)
			}
		})
	}
}

func uint32Self() uint32 { return uint32(os.Getuid()) }

// A peer that exits between connect() and the agent's read of its identity
// may have its pid handed to another process before the read: what the read
// returns is then someone else's. With the peer's pidfd (SO_PEERPIDFD) the
// agent notices the peer is gone and takes no identity for it.
func TestPeerGoneBeforeItsIdentityIsRead(t *testing.T) {
	t.Parallel()
	s, _ := newInternal(t, apitype.LivenessPID)
	ctx := context.Background()

	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Skipf("no pidfds here: %v", err)
	}
	defer unix.Close(pidfd)

	if id, err := s.identify(ctx, pid, pidfd); err != nil || id != pidprobetest.ID(1000) {
		t.Fatalf("identify of a live peer = %+v, %v; want the prober's identity", id, err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait() // reaped: its pid may go to anyone now
	if id, err := s.identify(ctx, pid, pidfd); err == nil {
		t.Errorf("identify of a peer that exited = %+v, nil; want an error", id)
	}
	// Without a pidfd (an older kernel) the read stands as the peer's.
	if _, err := s.identify(ctx, pid, -1); err != nil {
		t.Errorf("identify without a pidfd = %v, want the prober's answer", err)
	}
}
