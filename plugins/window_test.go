package plugins

import (
	"bytes"
	"context"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
)

// tapConn records every byte read from and written to a connection.
type tapConn struct {
	net.Conn
	mu      sync.Mutex
	in, out bytes.Buffer
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.in.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

func (c *tapConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.out.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

// tapListener hands out its connections tapped.
type tapListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*tapConn
}

func (l *tapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &tapConn{Conn: c}
	l.mu.Lock()
	l.conns = append(l.conns, tc)
	l.mu.Unlock()
	return tc, nil
}

// pings counts the PING frames (not their acknowledgements) in an HTTP/2
// byte stream.
func pings(t *testing.T, raw []byte) int {
	t.Helper()
	fr := http2.NewFramer(io.Discard, bytes.NewReader(raw))
	fr.SetMaxReadFrameSize(16 << 20)
	n := 0
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return n // the end of what was recorded (a frame may be cut off)
		}
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			n++
		}
	}
}

// The agent and the plugin grant each other a fixed flow-control window
// (DESIGN.md#plugin-window): with gRPC's default, each side measures the
// link with a PING after nearly every message it receives once the last
// measurement was answered, two more frames on the wire per round trip of
// the Calls stream. Served and dialled with the options the plugin and the
// agent use, calls on the Calls stream cross with no PING either way.
func TestTheCallStreamCarriesNoWindowPings(t *testing.T) {
	t.Parallel()
	store := openBolt(t, board.DefaultBoard(true), nil)
	srv := grpc.NewServer(wire.StaticWindowServerOptions...)
	registerStore(t, srv, store)
	sock := filepath.Join(t.TempDir(), "store.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	tl := &tapListener{Listener: lis}
	go srv.Serve(tl)
	conn, err := grpc.NewClient("unix://"+sock, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, wire.StaticWindowDialOptions...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	ctx := context.Background()
	if _, err := store.CreateCard(ctx, board.CreateCardParams{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	cc := newCallConn(conn)
	defer cc.close()
	v := newVerbs(cc)
	for range 200 {
		if _, err := v.GetCard(ctx, board.GetCardParams{ID: "c"}); err != nil {
			t.Fatal(err)
		}
	}
	srv.Stop() // every frame written and read; the taps are still
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if len(tl.conns) == 0 {
		t.Fatal("no connection was accepted")
	}
	fromAgent, fromPlugin := 0, 0
	for _, c := range tl.conns {
		c.mu.Lock()
		in := bytes.TrimPrefix(c.in.Bytes(), []byte(http2.ClientPreface))
		fromAgent += pings(t, in)
		fromPlugin += pings(t, c.out.Bytes())
		c.mu.Unlock()
	}
	if fromAgent != 0 || fromPlugin != 0 {
		t.Errorf("200 calls on the Calls stream carried %d PINGs from the agent and %d from the plugin, want none", fromAgent, fromPlugin)
	}
}
