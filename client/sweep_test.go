package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"testing"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

// sweepAgent serves a board route over a real Unix socket, answering a
// request for progress with the given NDJSON frames, and records the
// query of each request.
func sweepAgent(t *testing.T, frames []apitype.SweepFrame) (path string, queries *[]string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "sweep.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var qs []string
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/board/labels/rename", func(w http.ResponseWriter, r *http.Request) {
		qs = append(qs, r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, f := range frames {
			_ = json.NewEncoder(w).Encode(f)
			w.(http.Flusher).Flush()
		}
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return path, &qs
}

// TestSweepProgressStream: a sweep asked for its progress hands every
// progress frame to the callback and returns the report; an error frame
// after them is the error of its code; a stream that ends without either
// is an error, never an empty report.
func TestSweepProgressStream(t *testing.T) {
	t.Parallel()
	prog := func(d, n int) apitype.SweepFrame {
		return apitype.SweepFrame{Progress: &apitype.SweepProgress{Done: d, Total: n}}
	}
	rep := board.SweepReport{Op: "label rename", Cards: 150, Changed: []string{"c1"}, DryRun: true}
	for _, tc := range []struct {
		name    string
		frames  []apitype.SweepFrame
		wantErr error
	}{
		{"report", []apitype.SweepFrame{prog(100, 150), prog(150, 150), {Report: &rep}}, nil},
		{"error", []apitype.SweepFrame{prog(100, 150), {Error: &apitype.ErrorBody{Error: "store gone", Code: apitype.CodeUnavailable}}}, apitype.ErrUnavailable},
		{"cut short", []apitype.SweepFrame{prog(100, 150)}, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path, queries := sweepAgent(t, tc.frames)
			var seen []apitype.SweepProgress
			got, err := (&client.Client{Socket: path}).RenameLabel(context.Background(), "a", "b", client.SweepOptions{
				DryRun: true, Progress: func(p apitype.SweepProgress) { seen = append(seen, p) },
			})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
			} else if err != nil || got.Op != rep.Op || !got.DryRun || !slices.Equal(got.Changed, rep.Changed) {
				t.Fatalf("report = %+v, %v; want %+v", got, err, rep)
			}
			if len(seen) == 0 || seen[0] != (apitype.SweepProgress{Done: 100, Total: 150}) {
				t.Errorf("progress seen = %v, want it to start at 100 of 150", seen)
			}
			if len(*queries) != 1 || (*queries)[0] != "dry_run=true&progress=true" {
				t.Errorf("queries = %q, want dry_run=true&progress=true", *queries)
			}
		})
	}
}
