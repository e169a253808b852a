package main

import (
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/agentproc"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
)

// gate is a TCP forwarder to the MongoDB-wire test server that refuses
// every connection (accepts and closes it) until opened: a MongoDB that is
// down, then comes back, at one fixed address.
type gate struct {
	ln      net.Listener
	target  string
	open    atomic.Bool
	refused atomic.Int64
	wg      sync.WaitGroup
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, target: target}
	g.wg.Add(1)
	go g.serve()
	t.Cleanup(func() { ln.Close(); g.wg.Wait() })
	return g
}

func (g *gate) serve() {
	defer g.wg.Done()
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		if !g.open.Load() {
			g.refused.Add(1)
			c.Close()
			continue
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			defer c.Close()
			up, err := net.Dial("tcp", g.target)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
			<-done
		}()
	}
}

// startUnready starts the sandbox's agent without waiting for it to serve
// (Agent.Start waits for health), for tests of an agent that does not come
// up: its output, and a channel closed when it exits. It is interrupted
// (then killed) when the test ends, and its log printed if the test failed.
func (e *env) startUnready() (*agentproc.Buffer, <-chan struct{}) {
	e.t.Helper()
	cmd := exec.Command(binary, "agent", "--config", e.Config)
	cmd.Env, cmd.Dir = e.Environ(), e.Dir
	logs := &agentproc.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	e.t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if e.t.Failed() {
			e.t.Logf("agent log:\n%s", logs)
		}
	})
	return logs, exited
}

// TestE2ESIGTERMWhileWaitingForMongo: an agent told to stop while it
// waits for its MongoDB exits 0: the stop was asked for.
func TestE2ESIGTERMWhileWaitingForMongo(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: every attempt is refused.
	dead := freeAddr(t)
	e := newEnv(t, "")
	uri := "mongodb://" + dead + "/?directConnection=true&serverSelectionTimeoutMS=300&connectTimeoutMS=300"
	cfg := "socket: " + e.Socket + "\nstore: {backend: mongo, uri: \"" + uri + "\", database: sigterm}\n"
	if err := os.WriteFile(e.Config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "agent", "--config", e.Config)
	cmd.Env, cmd.Dir = e.Environ(), e.Dir
	logs := &agentproc.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	agentproc.WaitFor(t, 60*time.Second, "a logged attempt to reach the store", func() bool {
		return strings.Contains(logs.String(), "store unreachable")
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("SIGTERM while waiting for the store: %v, want exit 0\n%s", err, logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the agent did not exit on SIGTERM:\n%s", logs)
	}
}

// TestE2EUnreachableMongoAtStart: an agent whose MongoDB is down at start
// says so, keeps retrying and serves nothing — no socket, so no claim it
// could not fence — and serves as soon as the database answers.
func TestE2EUnreachableMongoAtStart(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(mongotest.URI(t))
	if err != nil {
		t.Fatal(err)
	}
	if u.Scheme != "mongodb" || strings.Contains(u.Host, ",") {
		t.Skip("needs a single-host mongodb:// test server")
	}
	g := newGate(t, u.Host)
	e := newEnv(t, "")
	uri := "mongodb://" + g.ln.Addr().String() + "/?directConnection=true&serverSelectionTimeoutMS=300&connectTimeoutMS=300"
	cfg := "socket: " + e.Socket + "\nstore: {backend: mongo, uri: \"" + uri + "\", database: " + mongotest.Database(t) + "}\n"
	if err := os.WriteFile(e.Config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	logs, exited := e.startUnready()

	// Two failed attempts logged: the agent is retrying, not giving up.
	agentproc.WaitFor(t, 60*time.Second, "two logged attempts to reach the store", func() bool {
		select {
		case <-exited:
			t.Fatalf("the agent exited instead of retrying")
		default:
		}
		return strings.Count(logs.String(), "store unreachable") >= 2
	})
	if _, _, code := e.Run("health"); code == 0 {
		t.Fatal("health answered 0 while the store was unreachable")
	}
	if _, err := os.Stat(e.Socket); !os.IsNotExist(err) {
		t.Errorf("socket exists while the store is unreachable (stat err %v): the agent must serve nothing", err)
	}
	if g.refused.Load() == 0 {
		t.Fatal("the agent never tried the database")
	}
	// One line per attempt, no go-plugin framing.
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if !strings.Contains(l, "agent starting") && !strings.Contains(l, "store unreachable") {
			t.Errorf("a line that is neither the start nor an attempt: %q", l)
		}
	}
	for _, framing := range pluginFraming {
		if strings.Contains(logs.String(), framing) {
			t.Errorf("the retries carry go-plugin's framing %q", framing)
		}
	}

	g.open.Store(true)
	agentproc.WaitFor(t, 60*time.Second, "the agent to serve once the store answers", func() bool {
		_, _, code := e.Run("health")
		return code == 0
	})
	e.MustRun("card", "create", "after-outage")
	if c := e.Card("after-outage"); c.State == "" {
		t.Errorf("card after the outage = %+v", c)
	}
}
