package plugins

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
	"github.com/leasekeeper/leasekeeper/storespec"
)

// streamCounts counts what the plugin's end of the Calls stream received
// and sent.
type streamCounts struct {
	mu        sync.Mutex
	messages  int   // CallBatch messages received
	calls     []int // calls in each of them
	cancels   int   // cancellations received
	replyMsgs int   // ReplyBatch messages sent
	replies   int   // replies in them
}

func (c *streamCounts) snapshot() (messages int, calls []int, cancels int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.messages, slices.Clone(c.calls), c.cancels
}

type countingStream struct {
	grpc.ServerStream
	c   *streamCounts
	ctx context.Context // the stream's context the handler sees, if not nil
}

func (s countingStream) Context() context.Context {
	if s.ctx != nil {
		return s.ctx
	}
	return s.ServerStream.Context()
}

func (s countingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if b, ok := m.(*storepb.CallBatch); ok && err == nil {
		s.c.mu.Lock()
		s.c.messages++
		s.c.calls = append(s.c.calls, len(b.GetCalls()))
		s.c.cancels += len(b.GetCancel())
		s.c.mu.Unlock()
	}
	return err
}

func (s countingStream) SendMsg(m any) error {
	if b, ok := m.(*storepb.ReplyBatch); ok {
		s.c.mu.Lock()
		s.c.replyMsgs++
		s.c.replies += len(b.GetReplies())
		s.c.mu.Unlock()
	}
	return s.ServerStream.SendMsg(m)
}

// servePair serves store on a Unix socket in t's temp dir, as the plugin
// does, counting the Calls stream's messages, and returns the agent's
// connection to it.
func servePair(t testing.TB, store board.Store) (*grpc.ClientConn, *streamCounts) {
	t.Helper()
	return servePairCtx(t, store, nil)
}

// servePairCtx is servePair, the plugin's Calls handler seeing the
// context streamCtx makes of its stream's own (if streamCtx is not nil).
func servePairCtx(t testing.TB, store board.Store, streamCtx func(context.Context) context.Context) (*grpc.ClientConn, *streamCounts) {
	t.Helper()
	counts := &streamCounts{}
	srv := grpc.NewServer(grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		cs := countingStream{ServerStream: ss, c: counts}
		if streamCtx != nil {
			cs.ctx = streamCtx(ss.Context())
		}
		return h(srv, cs)
	}))
	registerStore(t, srv, store)
	sock := filepath.Join(t.TempDir(), "store.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return conn, counts
}

// heldSends makes cc's first message wait in the sender until release is
// closed, after saying on sending that it is there; queued reports every
// time n calls wait behind it. While the first message is held, the calls
// made meanwhile pile up, and are sent together in the next message.
type heldSends struct {
	sending chan struct{}
	release chan struct{}
	waiting chan int
}

func holdFirstSend(cc *callConn) *heldSends {
	h := &heldSends{sending: make(chan struct{}), release: make(chan struct{}), waiting: make(chan int, 1024)}
	var first sync.Once
	cc.sending = func(*storepb.CallBatch) {
		first.Do(func() {
			// The first call's own report came before: only the calls
			// queued from now on wait behind the held message.
			for len(h.waiting) > 0 {
				<-h.waiting
			}
			close(h.sending)
			<-h.release
		})
	}
	cc.queued = func(n int) { h.waiting <- n }
	return h
}

// waitQueued blocks until n calls are queued behind the held message.
func (h *heldSends) waitQueued(t *testing.T, n int) {
	t.Helper()
	if n <= 0 {
		return
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case got := <-h.waiting:
			if got >= n {
				return
			}
		case <-timeout:
			t.Fatalf("%d calls were not queued within 30s", n)
		}
	}
}

// TestConcurrentCallsShareMessages: calls made while a message is being
// sent all go in the next one, and the plugin runs them together: the
// bbolt store gets them at once, and every caller gets its own answer.
func TestConcurrentCallsShareMessages(t *testing.T) {
	t.Parallel()
	conn, counts := servePair(t, openBolt(t, board.DefaultBoard(true), nil))
	cc := newCallConn(conn)
	held := holdFirstSend(cc)
	rs := newUnaryRemoteStore(cc, wire.ProtocolVersion)
	ctx := t.Context()

	const n = 24
	errs := make(chan error, n)
	create := func(i int) {
		_, err := rs.CreateCard(ctx, board.CreateCardParams{ID: fmt.Sprintf("c%02d", i), Title: fmt.Sprintf("card %d", i), Actor: "test"})
		errs <- err
	}
	go create(0)
	<-held.sending
	for i := 1; i < n; i++ {
		go create(i)
	}
	held.waitQueued(t, n-1)
	close(held.release)
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("CreateCard: %v", err)
		}
	}

	messages, calls, _ := counts.snapshot()
	if messages != 2 || !slices.Equal(calls, []int{1, n - 1}) {
		t.Errorf("the plugin received %d messages carrying %v calls; want 2 carrying [1 %d]", messages, calls, n-1)
	}
	for i := range n {
		c, err := rs.GetCard(ctx, board.GetCardParams{ID: fmt.Sprintf("c%02d", i)})
		if err != nil || c.Title != fmt.Sprintf("card %d", i) {
			t.Errorf("card c%02d after the batch: %+v, %v", i, c, err)
		}
	}
}

// TestOneCallsFailureIsItsOwn: in one message, a call the store refuses,
// a call whose answer cannot be encoded and calls that succeed each get
// their own outcome, and none of them condemns the plugin.
func TestOneCallsFailureIsItsOwn(t *testing.T) {
	t.Parallel()
	store := &scripted{getCard: func(_ context.Context, id string) (board.Card, error) {
		switch id {
		case "missing":
			return board.Card{}, board.NotFound("card", id)
		case "legacy":
			return board.Card{ID: id, Title: "legacy \xff title"}, nil
		}
		return board.Card{ID: id, Title: "title of " + id}, nil
	}}
	conn, counts := servePair(t, store)
	cc := newCallConn(conn)
	held := holdFirstSend(cc)
	rs := newUnaryRemoteStore(cc, wire.ProtocolVersion)
	ctx := t.Context()

	ids := []string{"a", "missing", "b", "legacy", "c"}
	type result struct {
		card board.Card
		err  error
	}
	results := make([]chan result, len(ids))
	get := func(i int) {
		c, err := rs.GetCard(ctx, board.GetCardParams{ID: ids[i]})
		results[i] <- result{c, err}
	}
	for i := range results {
		results[i] = make(chan result, 1)
	}
	go get(0)
	<-held.sending
	for i := 1; i < len(ids); i++ {
		go get(i)
	}
	held.waitQueued(t, len(ids)-1)
	close(held.release)

	for i, id := range ids {
		r := <-results[i]
		switch id {
		case "missing":
			if !errors.Is(r.err, board.ErrNotFound) || errors.Is(r.err, board.ErrOutcomeUnknown) {
				t.Errorf("GetCard(missing) = %v, want the store's ErrNotFound alone", r.err)
			}
		case "legacy":
			if r.err == nil || brokenPlugin(r.err) || !errors.Is(r.err, board.ErrOutcomeUnknown) {
				t.Errorf("GetCard(legacy) = %v, want a failed call (outcome unknown) that leaves the plugin alone", r.err)
			}
		default:
			if r.err != nil || r.card.Title != "title of "+id {
				t.Errorf("GetCard(%s) = %+v, %v, want its own card", id, r.card, r.err)
			}
		}
	}
	if _, calls, _ := counts.snapshot(); !slices.Equal(calls, []int{1, len(ids) - 1}) {
		t.Errorf("the calls travelled in messages of %v calls, want [1 %d]: the case tests nothing", calls, len(ids)-1)
	}
}

// blocking is a store whose GetCard of "slow" blocks until its ctx ends,
// reporting that it runs and how its ctx ended; other ids answer at once.
type blocking struct {
	entered chan struct{}
	ended   chan error
	dl      chan time.Time
	seen    chan string
}

func newBlocking() *blocking {
	return &blocking{entered: make(chan struct{}, 8), ended: make(chan error, 8), dl: make(chan time.Time, 8), seen: make(chan string, 64)}
}

func (b *blocking) store() *scripted {
	return &scripted{getCard: func(ctx context.Context, id string) (board.Card, error) {
		b.seen <- id
		if id != "slow" {
			return board.Card{ID: id}, nil
		}
		dl, _ := ctx.Deadline()
		b.dl <- dl
		b.entered <- struct{}{}
		<-ctx.Done()
		b.ended <- ctx.Err()
		return board.Card{}, ctx.Err()
	}}
}

// TestCancelledCallInABatch: a caller that gives up on a call sharing a
// message returns at once with the caller's own error (outcome unknown,
// the plugin not condemned); the plugin cancels that call's context; the
// other calls of the message are answered as if nothing happened.
func TestCancelledCallInABatch(t *testing.T) {
	t.Parallel()
	b := newBlocking()
	conn, counts := servePair(t, b.store())
	cc := newCallConn(conn)
	held := holdFirstSend(cc)
	rs := newUnaryRemoteStore(cc, wire.ProtocolVersion)
	ctx := t.Context()

	plug := make(chan error, 1)
	go func() { _, err := rs.GetCard(ctx, board.GetCardParams{ID: "plug"}); plug <- err }()
	<-held.sending
	slowCtx, cancelSlow := context.WithCancel(ctx)
	defer cancelSlow()
	slow := make(chan error, 1)
	go func() { _, err := rs.GetCard(slowCtx, board.GetCardParams{ID: "slow"}); slow <- err }()
	held.waitQueued(t, 1)
	fast := make(chan error, 1)
	go func() { _, err := rs.GetCard(ctx, board.GetCardParams{ID: "fast"}); fast <- err }()
	held.waitQueued(t, 2)
	close(held.release)

	if err := <-plug; err != nil {
		t.Fatalf("GetCard(plug): %v", err)
	}
	if err := <-fast; err != nil {
		t.Fatalf("GetCard(fast), sharing a message with a call that blocks: %v", err)
	}
	<-b.entered
	cancelSlow()
	err := <-slow
	if !errors.Is(err, context.Canceled) || !errors.Is(err, board.ErrOutcomeUnknown) || brokenPlugin(err) {
		t.Errorf("the cancelled call: %v, want Canceled and ErrOutcomeUnknown, the plugin not condemned", err)
	}
	select {
	case ended := <-b.ended:
		if !errors.Is(ended, context.Canceled) {
			t.Errorf("the store's ctx of the cancelled call ended with %v, want Canceled", ended)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the plugin did not cancel the abandoned call's context within 30s")
	}
	if _, calls, cancels := counts.snapshot(); !slices.Equal(calls[:2], []int{1, 2}) || cancels != 1 {
		t.Errorf("messages of %v calls and %d cancellations; want [1 2 ...] and 1", calls, cancels)
	}
	// The stream carries on.
	if _, err := rs.GetCard(ctx, board.GetCardParams{ID: "after"}); err != nil {
		t.Errorf("GetCard after the cancellation: %v", err)
	}
}

// TestDeadlineOfOneCallInABatch: a call's deadline crosses with it, as
// what is left of it, and ends it in the plugin; its neighbour in the
// message has no deadline and is unaffected.
func TestDeadlineOfOneCallInABatch(t *testing.T) {
	t.Parallel()
	b := newBlocking()
	conn, _ := servePair(t, b.store())
	cc := newCallConn(conn)
	held := holdFirstSend(cc)
	rs := newUnaryRemoteStore(cc, wire.ProtocolVersion)
	ctx := t.Context()

	plug := make(chan error, 1)
	go func() { _, err := rs.GetCard(ctx, board.GetCardParams{ID: "plug"}); plug <- err }()
	<-held.sending
	slowCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	callerDL, _ := slowCtx.Deadline()
	slow := make(chan error, 1)
	go func() { _, err := rs.GetCard(slowCtx, board.GetCardParams{ID: "slow"}); slow <- err }()
	held.waitQueued(t, 1)
	fast := make(chan error, 1)
	go func() { _, err := rs.GetCard(ctx, board.GetCardParams{ID: "fast"}); fast <- err }()
	held.waitQueued(t, 2)
	close(held.release)

	if err := <-fast; err != nil {
		t.Errorf("GetCard(fast) next to a call with a deadline: %v", err)
	}
	<-plug
	// Either deadline may fire first: the caller's (outcome unknown) or
	// the plugin's copy of it, and then the store's own answer crosses.
	err := <-slow
	if !errors.Is(err, context.DeadlineExceeded) || brokenPlugin(err) {
		t.Errorf("the call past its deadline: %v, want DeadlineExceeded, the plugin not condemned", err)
	}
	dl := <-b.dl
	if dl.IsZero() || dl.After(callerDL.Add(deadlineSkew)) {
		t.Errorf("the plugin ran the call with deadline %v; want one no later than the caller's %v", dl, callerDL)
	}
	if ended := <-b.ended; ended == nil {
		t.Error("the plugin's ctx of the call did not end")
	}
}

// childCounter is a stream's context that counts the contexts derived from
// it still waiting for it to end. Its Done is a channel of its own, so the
// context package does not find the stream's cancelCtx under it and
// registers every child through its AfterFunc method instead, withdrawing
// it (calling stop) when the child is cancelled.
type childCounter struct {
	context.Context // the stream's: its values and deadline
	done            chan struct{}
	live            atomic.Int64
}

func newChildCounter(parent context.Context) *childCounter {
	c := &childCounter{Context: parent, done: make(chan struct{})}
	context.AfterFunc(parent, func() { close(c.done) })
	return c
}

func (c *childCounter) Done() <-chan struct{} { return c.done }

func (c *childCounter) Err() error {
	select {
	case <-c.done:
		return c.Context.Err()
	default:
		return nil
	}
}

func (c *childCounter) AfterFunc(f func()) (stop func() bool) {
	c.live.Add(1)
	var gone sync.Once
	forget := func() { gone.Do(func() { c.live.Add(-1) }) }
	stopParent := context.AfterFunc(c.Context, func() {
		<-c.done // f reads Err, which is nil until then
		forget()
		f()
	})
	return func() bool {
		stopped := stopParent()
		if stopped {
			forget()
		}
		return stopped
	}
}

// TestCallContextsEndWithTheirCalls: every context the plugin derives from
// the Calls stream's for a call, with a deadline or without, is cancelled
// when the call is answered, so none stays hanging off the stream's (which
// lives as long as the plugin).
func TestCallContextsEndWithTheirCalls(t *testing.T) {
	t.Parallel()
	b := newBlocking()
	var streamCtx *childCounter
	made := make(chan struct{})
	conn, _ := servePairCtx(t, b.store(), func(ctx context.Context) context.Context {
		streamCtx = newChildCounter(ctx)
		close(made)
		return streamCtx
	})
	rs := newUnaryRemoteStore(newCallConn(conn), wire.ProtocolVersion)
	ctx := t.Context()

	// The counter sees a running call's context: the test can fail.
	slowCtx, cancelSlow := context.WithTimeout(ctx, time.Hour)
	defer cancelSlow()
	slow := make(chan error, 1)
	go func() { _, err := rs.GetCard(slowCtx, board.GetCardParams{ID: "slow"}); slow <- err }()
	<-b.entered
	<-made
	if n := streamCtx.live.Load(); n < 1 {
		t.Fatalf("%d contexts derived from the stream's while a call runs; the counter sees nothing", n)
	}
	cancelSlow()
	<-slow

	const n = 50
	for i := range n {
		callCtx, cancel := ctx, context.CancelFunc(func() {})
		if i%2 == 0 {
			callCtx, cancel = context.WithTimeout(ctx, time.Hour)
		}
		if _, err := rs.GetCard(callCtx, board.GetCardParams{ID: fmt.Sprintf("c%d", i)}); err != nil {
			t.Fatalf("GetCard: %v", err)
		}
		cancel()
	}
	// The plugin cancels a call's context before it sends the answer.
	if live := streamCtx.live.Load(); live != 0 {
		t.Errorf("%d contexts still derived from the stream's after %d answered calls (%d with a deadline), want 0", live, n+1, n/2+1)
	}
}

// TestCallAbandonedBeforeItIsSentIsNotSent: a call whose caller gives up
// while it still waits to be sent never reaches the plugin.
func TestCallAbandonedBeforeItIsSentIsNotSent(t *testing.T) {
	t.Parallel()
	b := newBlocking()
	conn, counts := servePair(t, b.store())
	cc := newCallConn(conn)
	held := holdFirstSend(cc)
	rs := newUnaryRemoteStore(cc, wire.ProtocolVersion)
	ctx := t.Context()

	plug := make(chan error, 1)
	go func() { _, err := rs.GetCard(ctx, board.GetCardParams{ID: "plug"}); plug <- err }()
	<-held.sending
	gone, cancel := context.WithCancel(ctx)
	abandoned := make(chan error, 1)
	go func() { _, err := rs.GetCard(gone, board.GetCardParams{ID: "abandoned"}); abandoned <- err }()
	held.waitQueued(t, 1)
	cancel()
	if err := <-abandoned; !errors.Is(err, context.Canceled) || !errors.Is(err, board.ErrOutcomeUnknown) {
		t.Errorf("the abandoned call: %v, want Canceled and ErrOutcomeUnknown (the caller cannot know it was not sent)", err)
	}
	close(held.release)
	if err := <-plug; err != nil {
		t.Fatal(err)
	}
	if _, err := rs.GetCard(ctx, board.GetCardParams{ID: "next"}); err != nil {
		t.Fatal(err)
	}
	close(b.seen)
	var seen []string
	for id := range b.seen {
		seen = append(seen, id)
	}
	if !slices.Equal(seen, []string{"plug", "next"}) {
		t.Errorf("the store saw %q, want [plug next]: the abandoned call was sent", seen)
	}
	if _, calls, cancels := counts.snapshot(); cancels != 0 || !slices.Equal(calls, []int{1, 1}) {
		t.Errorf("messages of %v calls and %d cancellations, want [1 1] and none", calls, cancels)
	}
}

// TestOversizedRequestFailsAlone: a request over the plugin's message limit
// fails as it did as a unary RPC (over the size limit, the plugin left
// alone), and is not put in a message, which would fail every call in it.
func TestOversizedRequestFailsAlone(t *testing.T) {
	t.Parallel()
	store := &scripted{
		getCard: func(_ context.Context, id string) (board.Card, error) { return board.Card{ID: id}, nil },
		listCards: func(_ context.Context, f board.ListCardsParams) ([]board.Card, error) {
			return nil, nil
		},
	}
	conn, counts := servePair(t, store)
	rs := newRemoteStore(conn, wire.ProtocolVersion)
	_, err := rs.ListCards(t.Context(), board.ListCardsParams{State: strings.Repeat("x", 5<<20)})
	if err == nil || brokenPlugin(err) || !strings.Contains(err.Error(), "larger than max") {
		t.Errorf("ListCards with a 5 MiB state: %v, want a call over the size limit that leaves the plugin alone", err)
	}
	if _, err := rs.GetCard(t.Context(), board.GetCardParams{ID: "c1"}); err != nil {
		t.Errorf("GetCard after the oversized call: %v", err)
	}
	if _, calls, _ := counts.snapshot(); !slices.Equal(calls, []int{1}) {
		t.Errorf("the plugin received messages of %v calls, want [1]", calls)
	}
}

// TestKilledMidBatchEveryCallIsOutcomeUnknown: the plugin dies while a
// message's calls run in it. Each of them fails as a call in flight on a
// dead plugin does: outcome unknown, the plugin condemned; the plugin is
// restarted once, and its stream serves calls again.
func TestKilledMidBatchEveryCallIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	logs := newLogWatch()
	p := launchBolt(t, logs, 10*time.Millisecond)
	ctx := t.Context()
	if _, err := p.CreateCard(ctx, board.CreateCardParams{ID: "c1", Actor: "cli"}); err != nil {
		t.Fatal(err)
	}

	const n = 6
	errs := make(chan error, n)
	for range n {
		go func() { _, err := p.GetCard(ctx, board.GetCardParams{ID: hangCard}); errs <- err }()
	}
	logs.waitCount(t, hangLine, n, 30*time.Second)
	pid := p.Status().PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	for range n {
		select {
		case err := <-errs:
			if !errors.Is(err, board.ErrOutcomeUnknown) || !brokenPlugin(err) {
				t.Errorf("a call in flight when the plugin died: %v, want ErrOutcomeUnknown from a broken plugin", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a call in flight did not return within 30s of the plugin's death")
		}
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.WaitUp(wctx); err != nil {
		t.Fatalf("WaitUp after the crash: %v", err)
	}
	if st := p.Status(); st.Restarts != 1 || st.PID == pid {
		t.Errorf("status after the crash: %+v, want one restart and a new pid", st)
	}
	if c, err := p.GetCard(ctx, board.GetCardParams{ID: "c1"}); err != nil || c.ID != "c1" {
		t.Errorf("GetCard after the restart: %+v, %v", c, err)
	}
}

// TestProtocolThreeStillServes: offered only the previous protocol, the
// agent and the plugin agree on it, and its client sends every call as its
// own RPC.
func TestProtocolThreeStillServes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := Launch(ctx, LaunchConfig{
		Cmd:       testPluginCmd(t, ""),
		Child:     &storespec.Spec{Backend: "bolt", Path: filepath.Join(t.TempDir(), "board.db"), Board: board.DefaultBoard(true), Lease: 30 * time.Second},
		Protocols: []int{wire.UnaryProtocolVersion},
	})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	defer p.Close()
	if v := p.Status().ProtocolVersion; v != wire.UnaryProtocolVersion {
		t.Errorf("negotiated protocol %d, want %d", v, wire.UnaryProtocolVersion)
	}
	if _, err := p.CreateCard(ctx, board.CreateCardParams{ID: "c1", Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Launch(ctx, LaunchConfig{Cmd: testPluginCmd(t, ""), Protocols: []int{99}}); err == nil {
		t.Error("Launch offering only a protocol this build does not speak succeeded")
	}
}

func TestProtocolThreeClientSendsEachCallAlone(t *testing.T) {
	t.Parallel()
	conn, counts := servePair(t, &scripted{getCard: func(_ context.Context, id string) (board.Card, error) {
		return board.Card{ID: id}, nil
	}})
	raw, err := (&storePlugin{unary: true}).GRPCClient(t.Context(), nil, conn)
	if err != nil {
		t.Fatal(err)
	}
	rs := raw.(*remoteStore)
	if c, err := rs.GetCard(t.Context(), board.GetCardParams{ID: "c1"}); err != nil || c.ID != "c1" {
		t.Fatalf("GetCard over protocol 3: %+v, %v", c, err)
	}
	if messages, _, _ := counts.snapshot(); messages != 0 {
		t.Errorf("the protocol 3 client sent %d messages on the Calls stream, want none", messages)
	}
}

// TestCallerGivesUpWhileTheStreamOpens: the stream is opened by the first
// call; a caller whose deadline passes while gRPC still waits for the
// connection (here a peer that accepts and never speaks) returns on time,
// and the stream it abandoned is not left behind for the next call.
func TestCallerGivesUpWhileTheStreamOpens(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "mute.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn // accepted, held open, never answered
	accepting := make(chan struct{})
	go func() {
		defer close(accepting)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	defer func() {
		lis.Close()
		<-accepting
		for _, c := range held {
			c.Close()
		}
	}()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cc := newCallConn(conn)
	rs := newUnaryRemoteStore(cc, wire.ProtocolVersion)

	for range 2 {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		start := time.Now()
		_, err := rs.GetCard(ctx, board.GetCardParams{ID: "c1"})
		cancel()
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("GetCard returned %s after its 200ms deadline", took)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, board.ErrOutcomeUnknown) || brokenPlugin(err) {
			t.Errorf("GetCard past its deadline while the stream opened: %v, want the caller's DeadlineExceeded", err)
		}
		cc.mu.Lock()
		sess := cc.sess
		cc.mu.Unlock()
		if sess != nil {
			t.Error("the abandoned stream was kept for the next call")
		}
	}
}
