package ui

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// DefaultListen is the address `leasekeeper ui` listens on by default.
const DefaultListen = "127.0.0.1:8080"

// Config configures a Server.
type Config struct {
	// Client reaches the agent. Required.
	Client *client.Client
	// Listen is a loopback host:port (default DefaultListen); port 0
	// picks a free one.
	Listen string
	// Token is what the URL must carry, once: the first request that
	// brings it consumes it. Empty mints a random one, which is what the
	// command does.
	Token  string
	Logger *slog.Logger
	// Now is the clock countdowns are computed against (default
	// time.Now).
	Now func() time.Time
}

// Server is the UI's HTTP server, listening once Listen returns.
type Server struct {
	cfg    Config
	ln     net.Listener
	token  string
	cookie string
	// mu guards session: empty until the URL's token is traded, then the
	// secret the cookie carries (minted at that trade, never the token).
	mu      sync.Mutex
	session string
	// hosts are the Host header values accepted: the bound address and
	// localhost, each on the bound port.
	hosts map[string]bool
	feed  *feed
	runs  *runCache
	cards cardCache
	hist  *history
	pages map[string]*template.Template
	mux   *http.ServeMux
	done  chan struct{}
}

// ErrNotLoopback is returned by Listen for an address that is not a
// loopback one.
var ErrNotLoopback = errors.New("the UI listens on a loopback address only")

// Listen validates cfg, binds the listen address and prepares the server;
// Serve serves it.
func Listen(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("ui: no agent client")
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := CheckListen(cfg.Listen); err != nil {
		return nil, err
	}
	token := cfg.Token
	if token == "" {
		token = randomSecret()
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("ui: %w", err)
	}
	// The name checked above may resolve elsewhere (a resolver that maps
	// localhost to another address): what counts is the address bound.
	if err := checkBound(ln.Addr()); err != nil {
		_ = ln.Close()
		return nil, err
	}
	addr := ln.Addr().(*net.TCPAddr)
	port := strconv.Itoa(addr.Port)
	s := &Server{
		cfg: cfg, ln: ln, token: token,
		// Cookies are not scoped by port: the port in the name keeps two
		// UIs on one host from overwriting each other's token.
		cookie: "leasekeeper_ui_" + port,
		hosts: map[string]bool{
			addr.String():                       true,
			net.JoinHostPort("localhost", port): true,
		},
		runs:  newRunCache(),
		hist:  newHistory(),
		pages: pages,
		done:  make(chan struct{}),
	}
	if port == "80" {
		s.hosts[addr.IP.String()], s.hosts["localhost"] = true, true
	}
	s.feed = newFeed(cfg.Client, s.runs, cfg.Logger)
	s.feed.hist = s.hist
	s.routes()
	return s, nil
}

// CheckListen says whether addr is an address the UI may listen on: a
// loopback host and a port. The error wraps ErrNotLoopback when the host
// is not a loopback one.
func CheckListen(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: listen address %q: %w", ErrNotLoopback, addr, err)
	}
	if !isLoopback(host) {
		return fmt.Errorf("%w: %q is not (reach it from elsewhere through an SSH tunnel)", ErrNotLoopback, addr)
	}
	return nil
}

// checkBound says whether a, the address a listener bound, is a loopback
// TCP address.
func checkBound(a net.Addr) error {
	ta, ok := a.(*net.TCPAddr)
	if !ok || !ta.IP.IsLoopback() {
		return fmt.Errorf("%w: bound %s, which is not a loopback address", ErrNotLoopback, a)
	}
	return nil
}

func randomSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// URL is the address to open: it carries the token, which the server
// trades for a cookie on the first request that brings it; the URL is
// good for that one request only.
func (s *Server) URL() string {
	return "http://" + s.ln.Addr().String() + "/?token=" + url.QueryEscape(s.token)
}

// Serve serves until ctx ends, then shuts down (open event streams end).
func (s *Server) Serve(ctx context.Context) error {
	feedCtx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	go s.feed.run(feedCtx)
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 5 * time.Second,
		// No ReadTimeout or WriteTimeout: either would end the long-lived
		// event stream (the server cancels a request's context when the
		// connection's read deadline passes). No route reads a body.
		IdleTimeout: 60 * time.Second,
		ErrorLog:    slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(s.ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	close(s.done)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (s *Server) now() time.Time { return s.cfg.Now() }

// routes lists every route. All are reads except POST /preview, which asks
// the agent for a dry-run pass (the agent writes nothing for one). The
// mux answers any other method with 405.
func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", s.handleBoardPage)
	m.HandleFunc("GET /board", s.handleBoardFragment)
	m.HandleFunc("GET /board/parts", s.handleBoardParts)
	m.HandleFunc("GET /cards/{id}", s.handleCardPage)
	m.HandleFunc("GET /cards/{id}/fragment", s.handleCardFragment)
	m.HandleFunc("GET /cards/{id}/parts", s.handleCardParts)
	m.HandleFunc("GET /events", s.handleEvents)
	m.HandleFunc("POST /preview", s.handlePreview)
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux = m
}

// ServeHTTP applies the checks every request passes before its route:
// the Host, the token, the method.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// The entry URL carries the token: never send it on as a referrer.
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")

	// DNS rebinding: a hostile name resolved to 127.0.0.1 reaches this
	// port with its own name as the Host.
	if !s.hosts[strings.ToLower(r.Host)] {
		http.Error(w, "forbidden: unexpected Host "+strconv.Quote(r.Host)+"; open the URL leasekeeper ui printed", http.StatusForbidden)
		return
	}
	if tok, ok := r.URL.Query()["token"]; ok && r.Method == http.MethodGet {
		if len(tok) != 1 || !s.tokenOK(tok[0]) {
			http.Error(w, "unauthorized: wrong token", http.StatusUnauthorized)
			return
		}
		secret, ok := s.exchange()
		if !ok {
			s.render(w, "error", "page", nil, errTokenUsed)
			return
		}
		http.SetCookie(w, &http.Cookie{
			Name: s.cookie, Value: secret, Path: "/",
			HttpOnly: true, SameSite: http.SameSiteStrictMode,
		})
		// Drop the token from the address bar and the history; stay on
		// this origin whatever the path looked like.
		q := r.URL.Query()
		q.Del("token")
		dest := url.URL{Path: localPath(r.URL.Path), RawQuery: q.Encode()}
		http.Redirect(w, r, dest.String(), http.StatusSeeOther)
		return
	}
	if c, err := r.Cookie(s.cookie); err != nil || !s.sessionOK(c.Value) {
		http.Error(w, "unauthorized: open the URL (with its token) that leasekeeper ui printed", http.StatusUnauthorized)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// errTokenUsed is the answer to the URL's token brought a second time.
var errTokenUsed = &statusError{
	code: http.StatusUnauthorized,
	msg: "unauthorized: this URL's token has been used already (it opens one browser session, once). " +
		"Use the tab it opened, or restart leasekeeper ui for a new URL.",
}

type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// exchange consumes the URL's token: the first call mints the session
// secret and returns it, every later one returns false.
func (s *Server) exchange() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.session != "" {
		return "", false
	}
	s.session = randomSecret()
	return s.session, true
}

func (s *Server) tokenOK(got string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) == 1
}

func (s *Server) sessionOK(got string) bool {
	s.mu.Lock()
	secret := s.session
	s.mu.Unlock()
	return secret != "" && subtle.ConstantTimeCompare([]byte(got), []byte(secret)) == 1
}

// localPath is p made a path of this origin: one leading slash, no
// backslash (a browser reads one as a slash), cleaned; "/" when p is none.
func localPath(p string) string {
	if !strings.HasPrefix(p, "/") {
		return "/"
	}
	return path.Clean(strings.ReplaceAll(p, "\\", "/"))
}

func filterOf(r *http.Request) filter {
	q := r.URL.Query()
	f := filter{State: q.Get("state"), Label: q.Get("label"), Holder: q.Get("holder"), Q: strings.TrimSpace(q.Get("q"))}
	for _, v := range q["show"] {
		i := strings.LastIndexByte(v, ':')
		if i < 0 {
			continue
		}
		if n, err := strconv.Atoi(v[i+1:]); err == nil && n > 0 {
			if f.Show == nil {
				f.Show = map[string]int{}
			}
			f.Show[v[:i]] = n
		}
	}
	return f
}

func (s *Server) handleBoardPage(w http.ResponseWriter, r *http.Request) {
	f := filterOf(r)
	v, err := s.loadBoard(r.Context(), f)
	if err == nil {
		v.Parts, err = s.fullParts("board", v.partSpecs())
	}
	if err != nil && isUnreachable(err) {
		// The page itself, empty, saying why: its script keeps asking and
		// fills it in when the agent is back.
		v = boardView{Filter: f, Down: s.down(err), RefreshMS: 1000}
		err = nil
	}
	s.render(w, "board", "page", v, err)
}

func (s *Server) handleBoardFragment(w http.ResponseWriter, r *http.Request) {
	v, err := s.loadBoard(r.Context(), filterOf(r))
	if err == nil {
		v.Parts, err = s.fullParts("board", v.partSpecs())
	}
	s.render(w, "board", "live", v, err)
}

// handleBoardParts is the page's update: the board's parts, each with its
// hash, and the HTML only of those whose hash the page does not hold.
func (s *Server) handleBoardParts(w http.ResponseWriter, r *http.Request) {
	v, err := s.loadBoard(r.Context(), filterOf(r))
	if err != nil {
		s.renderPartsError(w, err)
		return
	}
	ps, err := s.parts("board", v.partSpecs(), haveOf(r))
	s.renderParts(w, v.Now, ps, err)
}

func (s *Server) handleCardPage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p, err := s.loadCard(r.Context(), id)
	if err == nil {
		p.Parts, err = s.fullParts("card", p.partSpecs())
	}
	if err != nil && isUnreachable(err) {
		ev := errorView{Err: err.Error(), Code: http.StatusBadGateway, Down: s.down(err), Src: "/cards/" + url.PathEscape(id) + "/parts"}
		s.renderStatus(w, "error", "page", ev, ev.Code)
		return
	}
	s.render(w, "card", "page", p, err)
}

func (s *Server) handleCardFragment(w http.ResponseWriter, r *http.Request) {
	p, err := s.loadCard(r.Context(), r.PathValue("id"))
	if err == nil {
		p.Parts, err = s.fullParts("card", p.partSpecs())
	}
	s.render(w, "card", "live", p, err)
}

func (s *Server) handleCardParts(w http.ResponseWriter, r *http.Request) {
	p, err := s.loadCard(r.Context(), r.PathValue("id"))
	if err != nil {
		s.renderPartsError(w, err)
		return
	}
	ps, err := s.parts("card", p.partSpecs(), haveOf(r))
	s.renderParts(w, p.Now, ps, err)
}

// handlePreview runs a dry-run reaper pass: the decision the watchdog would
// take about every expired claim now, and nothing written. Only a request
// from this server's own page may ask (a cross-site form cannot: it sends
// a foreign Origin and, SameSite=Strict, no cookie).
func (s *Server) handlePreview(w http.ResponseWriter, r *http.Request) {
	if o := r.Header.Get("Origin"); o != "http://"+r.Host {
		http.Error(w, "forbidden: the preview is asked for from the board page only", http.StatusForbidden)
		return
	}
	pass, err := s.cfg.Client.ReaperPass(r.Context(), true)
	var pv *passView
	if err == nil {
		pv = newPassView(pass)
	} else {
		pv = &passView{Err: previewError(err)}
	}
	s.render(w, "board", "preview", pv, nil)
}

func previewError(err error) string {
	switch {
	case errors.Is(err, client.ErrForbidden):
		return "the preview needs an operator: start leasekeeper ui as a uid listed in the agent's operators (" + err.Error() + ")"
	case errors.Is(err, client.ErrUnavailable):
		return "this agent has no reaper: " + err.Error()
	}
	return err.Error()
}

// renderStatus executes one template of a page with data and sends it
// with code.
func (s *Server) renderStatus(w http.ResponseWriter, page, name string, data any, code int) {
	var buf bytes.Buffer
	if err := s.pages[page].ExecuteTemplate(&buf, name, data); err != nil {
		s.cfg.Logger.Error("render", "page", page, "template", name, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// render executes one template of a page into a buffer first, so a failed
// render never sends half a page.
func (s *Server) render(w http.ResponseWriter, page, name string, data any, loadErr error) {
	if loadErr != nil {
		code := http.StatusBadGateway
		var se *statusError
		switch {
		case errors.Is(loadErr, board.ErrNotFound):
			code = http.StatusNotFound
		case errors.As(loadErr, &se):
			code = se.code
		}
		ev := errorView{Err: loadErr.Error(), Code: code}
		if isUnreachable(loadErr) {
			ev.Down = s.down(loadErr)
			if name == "live" {
				name = "downfragment"
			}
		}
		var buf bytes.Buffer
		if err := s.pages["error"].ExecuteTemplate(&buf, name, ev); err != nil {
			http.Error(w, loadErr.Error(), code)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(code)
		_, _ = w.Write(buf.Bytes())
		return
	}
	var buf bytes.Buffer
	if err := s.pages[page].ExecuteTemplate(&buf, name, data); err != nil {
		s.cfg.Logger.Error("render", "page", page, "template", name, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

type errorView struct {
	Err  string
	Code int
	Down *downView
	// Src is the update the page keeps asking for, if any: the page
	// reloads when it answers.
	Src string
}

// keepAlive is how often an idle event stream carries a comment, so a
// browser or proxy that dropped the connection is noticed.
const keepAlive = 15 * time.Second

// handleEvents is the browser's event stream (server-sent events): one
// message per agent event, and a resync after the server's own link to the
// agent came back. The page re-reads the board on each.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	ch, unsubscribe := s.feed.subscribe()
	defer unsubscribe()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprintf(w, "retry: 1000\nevent: hello\ndata: {}\n\n"); err != nil {
		return
	}
	if rc.Flush() != nil {
		return
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		var err error
		select {
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		case <-tick.C:
			_, err = fmt.Fprint(w, ": keep-alive\n\n")
		case c := <-ch:
			b, _ := json.Marshal(c)
			if c.Seq > 0 {
				_, err = fmt.Fprintf(w, "id: %d\n", c.Seq)
			}
			if err == nil {
				_, err = fmt.Fprintf(w, "event: change\ndata: %s\n\n", b)
			}
		}
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}
