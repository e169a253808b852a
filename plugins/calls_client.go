package plugins

import (
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// callConn carries the Store service's unary RPCs on one Calls stream
// (protocol version 4). It is a grpc.ClientConnInterface: the generated
// client, and sendableConn in front of it, call Invoke as they would on the
// connection itself, and each Invoke fails with the gRPC status the unary
// RPC would have failed with, so callError classifies it the same way.
//
// Batching is natural, with no timer: one goroutine sends, and every call
// queued while it was sending the previous message, or while the
// goroutines ready to run when it woke ran first, goes in the next one. A
// lone call is sent at once; concurrent calls share messages, and the
// plugin runs them together (so the bbolt store commits their writes in
// one transaction).
//
// A caller that gives up (its ctx ends) returns at once, as a unary RPC
// does; a call not yet sent is dropped, one already sent is cancelled in the
// plugin by the next message, and its reply is discarded. When the stream
// fails, every call waiting on it fails with the stream's status (the
// connection is gone: outcome unknown, the plugin is broken), and the next
// call opens a new stream.
type callConn struct {
	conn grpc.ClientConnInterface

	mu     sync.Mutex
	sess   *callSession // nil before the first call and after a failure
	nextID uint64
	closed bool

	// Test hooks, nil in production: queued runs (with mu held) after a
	// call is queued, with the number of calls waiting to be sent; sending
	// runs before each message is sent.
	queued  func(waiting int)
	sending func(*storepb.CallBatch)
}

// callSession is one Calls stream and the calls on it. Its fields other
// than stream, cancel, wake and done are guarded by callConn.mu.
type callSession struct {
	stream  storepb.Store_CallsClient
	cancel  context.CancelFunc
	wake    chan struct{} // a send is due; capacity 1
	done    chan struct{} // closed when the stream failed
	queue   []*storepb.Call
	cancels []uint64
	pending map[uint64]chan callResult
}

// callResult is what came back for one call: its encoded reply, its
// encoded status, or the failure of the whole stream.
type callResult struct {
	reply  []byte
	status []byte
	err    error
}

var _ grpc.ClientConnInterface = (*callConn)(nil)

func newCallConn(conn grpc.ClientConnInterface) *callConn { return &callConn{conn: conn} }

// NewStream is not offered: the Store service's RPCs are all unary.
func (c *callConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "store plugin: streams are not carried on the Calls stream")
}

func (c *callConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	codec := encoding.GetCodecV2(protoCodec)
	for _, o := range opts {
		if f, ok := o.(grpc.ForceCodecV2CallOption); ok {
			codec = f.CodecV2
		}
	}
	buf, err := codec.Marshal(args)
	if err != nil {
		return status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	req := buf.Materialize()
	buf.Free()
	if len(req) > wire.MaxCallBytes {
		return status.Errorf(codes.ResourceExhausted, "grpc: trying to send message larger than max (%d vs. %d)", len(req), wire.MaxCallBytes)
	}
	call := &storepb.Call{Method: method, Request: req}
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			return status.FromContextError(context.DeadlineExceeded).Err()
		}
		call.TimeoutNanos = int64(left)
	}

	sess, res, err := c.enqueue(ctx, call)
	if err != nil {
		return err
	}
	select {
	case r := <-res:
		return decodeResult(codec, r, reply)
	case <-ctx.Done():
		c.abandon(sess, call)
		return status.FromContextError(ctx.Err()).Err()
	}
}

// decodeResult turns one call's result into what Invoke returns.
func decodeResult(codec encoding.CodecV2, r callResult, reply any) error {
	switch {
	case r.err != nil:
		return r.err
	case r.status != nil:
		var sp spb.Status
		if err := proto.Unmarshal(r.status, &sp); err != nil {
			return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received status: %v", err)
		}
		if sp.GetCode() == int32(codes.OK) {
			return status.Error(codes.Internal, "store plugin: a failed call's reply carries no error")
		}
		return status.FromProto(&sp).Err()
	}
	if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(r.reply)}, reply); err != nil {
		return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
	}
	return nil
}

// enqueue queues call on the current stream, opening one if there is none,
// and returns where its result will arrive.
func (c *callConn) enqueue(ctx context.Context, call *storepb.Call) (*callSession, chan callResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, nil, status.Error(codes.Unavailable, "store plugin: the call stream is closed")
	}
	if c.sess == nil {
		sess, err := c.open(ctx)
		if err != nil {
			return nil, nil, err
		}
		c.sess = sess
	}
	s := c.sess
	c.nextID++
	call.Id = c.nextID
	res := make(chan callResult, 1)
	s.pending[call.Id] = res
	s.queue = append(s.queue, call)
	if c.queued != nil {
		c.queued(len(s.queue))
	}
	s.signal()
	return s, res, nil
}

// open starts a Calls stream and its sending and receiving goroutines.
// c.mu is held. The stream lives until it fails or the connection closes,
// not as long as the caller's ctx; but a caller giving up while the stream
// is being opened (gRPC waits for a connection that is still being made)
// abandons the open, and with it the stream.
func (c *callConn) open(ctx context.Context) (*callSession, error) {
	life, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	stream, err := storepb.NewStoreClient(c.conn).Calls(life)
	if !stop() {
		cancel()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	s := &callSession{
		stream: stream, cancel: cancel,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		pending: make(map[uint64]chan callResult),
	}
	go c.send(s)
	go c.receive(s)
	return s, nil
}

func (s *callSession) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// abandon is a caller giving up on call: dropped if it was not sent yet,
// else cancelled in the plugin by the next message. Its result, if one
// comes, is discarded.
func (c *callConn) abandon(s *callSession, call *storepb.Call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, waiting := s.pending[call.Id]; !waiting {
		return // answered, or the stream failed, meanwhile
	}
	delete(s.pending, call.Id)
	for i, q := range s.queue {
		if q == call {
			s.queue = append(s.queue[:i:i], s.queue[i+1:]...)
			return
		}
	}
	s.cancels = append(s.cancels, call.Id)
	s.signal()
}

// send sends the queued calls and cancellations until the stream fails:
// all that are waiting in one message, up to wire.MaxBatchBytes of requests.
func (c *callConn) send(s *callSession) {
	for {
		select {
		case <-s.wake:
		case <-s.done:
			return
		}
		// Let the goroutines that are ready to run go first: callers woken
		// together (by the replies of one commit) queue their next calls
		// now, and share this message instead of one each. With nothing
		// else ready, this returns at once.
		runtime.Gosched()
		c.mu.Lock()
		batch := &storepb.CallBatch{Cancel: s.cancels}
		s.cancels = nil
		size := 0
		n := 0
		for n < len(s.queue) && (n == 0 || size+len(s.queue[n].Request) <= wire.MaxBatchBytes) {
			size += len(s.queue[n].Request)
			n++
		}
		batch.Calls = s.queue[:n:n]
		s.queue = s.queue[n:]
		if len(s.queue) > 0 {
			s.signal()
		}
		hook := c.sending
		c.mu.Unlock()
		if len(batch.Calls) == 0 && len(batch.Cancel) == 0 {
			continue
		}
		if hook != nil {
			hook(batch)
		}
		if err := s.stream.Send(batch); err != nil {
			// The stream is broken; receive gets its status and fails the
			// calls waiting on it.
			return
		}
	}
}

// receive hands each reply to its caller until the stream fails, then
// fails every call still waiting on it with the stream's status.
func (c *callConn) receive(s *callSession) {
	for {
		rb, err := s.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				// The plugin ended the stream, which the agent never
				// closes: calls were lost in it.
				err = status.Error(codes.Unavailable, "store plugin: the plugin ended the call stream")
			}
			c.fail(s, err)
			return
		}
		c.mu.Lock()
		for _, r := range rb.GetReplies() {
			if res, ok := s.pending[r.GetId()]; ok {
				delete(s.pending, r.GetId())
				res <- callResult{reply: r.GetReply(), status: r.GetStatus()}
			}
		}
		c.mu.Unlock()
	}
}

// close ends the stream; calls still waiting on it fail as on a
// connection that closed, and later calls fail at once.
func (c *callConn) close() {
	c.mu.Lock()
	s := c.sess
	c.sess, c.closed = nil, true
	c.mu.Unlock()
	if s != nil {
		s.cancel()
	}
}

// fail ends s after its stream failed with err.
func (c *callConn) fail(s *callSession, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == s {
		c.sess = nil
	}
	for id, res := range s.pending {
		res <- callResult{err: err}
		delete(s.pending, id)
	}
	s.queue, s.cancels = nil, nil
	close(s.done)
	s.cancel()
}
