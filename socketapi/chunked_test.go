package socketapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/socketapi"
	"github.com/leasekeeper/leasekeeper/socketapi/socketapitest"
)

// A body over the cap is 413 whether it declares its length or is sent
// chunked (no Content-Length: the cap can only be found while reading).
func TestChunkedBodyOverTheCapIs413(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{})
	r := newRaw(t, a.Path)
	huge := `{"card":"` + strings.Repeat("x", 2<<20) + `"}`
	notJSON := strings.Repeat("x", 2<<20)
	for _, tc := range []struct{ path, body string }{
		{"/v1/claims", huge}, {"/v1/cards", huge}, {"/v1/claims", notJSON},
	} {
		path := tc.path
		// io.MultiReader hides the length, so the client sends it chunked.
		got := r.do("POST", path, http.Header{"Content-Type": {"application/json"}}, io.MultiReader(strings.NewReader(tc.body)))
		if got.status != http.StatusRequestEntityTooLarge || got.err.Code != apitype.CodeTooLarge {
			t.Errorf("chunked POST %s over the cap: %d %q (%s), want 413 %q", path, got.status, got.err.Code, got.err.Error, apitype.CodeTooLarge)
		}
		r.mustAnswer()
	}
}

// A watch subscriber that falls further behind than the frame buffer holds
// is told it missed frames and cut off, instead of holding a stream the
// agent keeps writing into.
func TestSlowWatchSubscriberIsCutOffAfterAMissedFrame(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{})
	c, err := net.Dial("unix", a.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /v1/watch?after=0 HTTP/1.1\r\nHost: leasekeeper\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	// The stream is open (its first hello read)...
	if !sc.Scan() {
		t.Fatalf("no hello frame: %v", sc.Err())
	}
	// ...and the subscriber reads nothing more while far more frames than
	// the buffer holds are published.
	pad := strings.Repeat("p", 200)
	for i := range 3 * socketapi.DefaultFrameBuffer {
		a.Server.Notify(apitype.Frame{Type: apitype.FrameLaunch, Card: fmt.Sprintf("c%05d-%s", i, pad)})
	}
	// Now it reads: somewhere in the stream a hello says frames were
	// missed, and the stream ends right after it.
	var last apitype.Frame
	missed := 0
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatalf("frame %q: %v", sc.Bytes(), err)
		}
		if last.Type == apitype.FrameHello && last.Missed && last.Seq > 0 {
			missed++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("the stream did not end (read error %v): a slow subscriber must be cut off", err)
	}
	if missed != 1 || last.Type != apitype.FrameHello || !last.Missed {
		t.Errorf("stream ended with %+v after %d missed hellos, want it to end on the one missed hello", last, missed)
	}
}
