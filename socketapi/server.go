package socketapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/lease"
)

// Server is the agent's local API on a Unix socket.
type Server struct {
	cfg     Config
	lease   *lease.Service
	handler http.Handler
	frames  *ring

	// closing is closed when Shutdown starts, so long-lived streams end
	// and http.Server.Shutdown does not wait for them forever.
	closing   chan struct{}
	closeOnce sync.Once
	// wrote is signalled after every write this server makes, so a
	// following events stream wakes without waiting for its poll.
	wrote *signal

	mu  sync.Mutex
	srv *http.Server
	// sock is the socket file as created, so Shutdown removes only the
	// file it made, never one another agent put there since.
	sock      os.FileInfo
	serveDone chan struct{}
	serveErr  error
}

// New validates cfg and builds a server. It does not listen yet.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ls, err := lease.New(lease.Config{Store: cfg.Store, Claims: cfg.Claims, Clock: cfg.Clock, Lease: cfg.Lease, Logger: cfg.Logger, HeadHint: cfg.EventHeadHint,
		RetentionAge: cfg.RetentionAge, KeepEventsFrom: cfg.KeepEventsFrom})
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:     cfg,
		lease:   ls,
		frames:  newRing(cfg.FrameBuffer),
		closing: make(chan struct{}),
		wrote:   newSignal(),
	}
	s.handler = s.routes()
	return s, nil
}

// Handler is the server's HTTP handler, for tests that drive it without a
// socket. Requests reaching it without peer credentials are refused.
func (s *Server) Handler() http.Handler { return s.handler }

// Path is the socket path.
func (s *Server) Path() string { return s.cfg.Path }

// ErrAgentRunning is returned by Start when a live agent already answers on
// the socket path.
var ErrAgentRunning = errors.New("another agent is serving")

// listen creates the socket the way a daemon must not get wrong: create the
// parent directory; dial first, and refuse to start when a live agent
// answers (removing its socket would orphan its workers); remove only a
// dead socket file, and refuse to remove anything that is not a socket;
// listen; chmod 0660 so only the owner and the group may connect.
func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("%w %s", ErrAgentRunning, path)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket; refusing to remove it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing stale socket: %w", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("%w %s (it started while this one did)", ErrAgentRunning, path)
		}
		return nil, err
	}
	// The listener would unlink the path on Close; Shutdown removes it
	// itself, and only when it is still ours.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		os.Remove(path)
		return nil, fmt.Errorf("chmod socket: %w", err)
	}
	return ln, nil
}

// Start listens on the socket and serves in the background.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("socketapi: already started")
	}
	ln, err := listen(s.cfg.Path)
	if err != nil {
		return err
	}
	s.sock, _ = os.Lstat(s.cfg.Path)
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: the watch and events streams are long-lived.
		MaxHeaderBytes: 64 << 10,
		ConnContext:    s.connContext,
		BaseContext:    func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ErrorLog:       nil,
	}
	s.serveDone = make(chan struct{})
	srv, done := s.srv, s.serveDone
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.serveErr = err
		close(done)
	}()
	s.cfg.Logger.Info("socket api listening", "socket", s.cfg.Path, "liveness", s.cfg.Liveness())
	return nil
}

// Serve starts the server and blocks until ctx is done, then shuts down.
func (s *Server) Serve(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-s.serveDone:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return s.Shutdown(sctx)
}

// StopGranting makes every new claim fail with 503 "agent shutting down"
// while owner writes, releases and reads keep working: fences stay intact
// and workers can still finish or hand back what they hold.
func (s *Server) StopGranting() { s.lease.StopGranting() }

// Draining reports whether new claims are refused.
func (s *Server) Draining() bool { return s.lease.Draining() }

// Shutdown stops granting, ends the streams, stops the HTTP server and
// removes the socket file.
func (s *Server) Shutdown(ctx context.Context) error {
	s.StopGranting()
	s.closeOnce.Do(func() { close(s.closing) })
	s.mu.Lock()
	srv, sock, done := s.srv, s.sock, s.serveDone
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		srv.Close()
	}
	<-done
	if err == nil {
		err = s.serveErr
	}
	// Remove the socket only if it is still the file we created: another
	// agent may have put its own there since our listener closed.
	if fi, lerr := os.Lstat(s.cfg.Path); lerr == nil && sock != nil && os.SameFile(fi, sock) {
		os.Remove(s.cfg.Path)
	}
	return err
}

// Notify pushes a claim_lost or launch frame onto the watch stream. The
// heartbeat loop calls it when it stops holding a claim; the agent's
// effects layer calls it for launch hints, which it derives from the
// store's event log (the server makes none of its own). The frame's Seq is
// assigned here.
func (s *Server) Notify(f apitype.Frame) {
	s.frames.push(f)
}

// signal is a broadcast: wait returns a channel closed at the next fire.
// The channel is made by the first wait after a fire, so a fire nobody
// waits for (every write, while no events stream follows) costs no
// allocation.
type signal struct {
	mu sync.Mutex
	ch chan struct{} // nil: nobody waits since the last fire
}

func newSignal() *signal { return &signal{} }

func (g *signal) wait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
	return g.ch
}

func (g *signal) fire() {
	g.mu.Lock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
	g.mu.Unlock()
}
