package serve

import (
	"context"
	"io"
	"runtime"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// unaryHandlers are the Store service's unary RPCs by full method name,
// for the calls that arrive on the Calls stream.
var unaryHandlers = func() map[string]grpc.MethodHandler {
	m := make(map[string]grpc.MethodHandler, len(storepb.Store_ServiceDesc.Methods))
	for _, d := range storepb.Store_ServiceDesc.Methods {
		m["/"+storepb.Store_ServiceDesc.ServiceName+"/"+d.MethodName] = d.Handler
	}
	return m
}()

// Calls serves the unary RPCs the agent sends on one stream. Every call
// runs at once in its own goroutine, under the stream's context and its
// own deadline, so the calls of one message reach the store together (and
// the bbolt store commits their writes in one transaction). Each reply is
// sent when its call returns, gathered with whatever other replies are
// ready (see replyOutbox). The stream ends when the agent closes its side
// (after the last replies) or the connection goes.
func (s *server) Calls(stream storepb.Store_CallsServer) error {
	var (
		mu      sync.Mutex
		running = map[uint64]context.CancelFunc{}
		wg      sync.WaitGroup
	)
	out := &replyOutbox{stream: stream}
	var recvErr error
	for {
		b, err := stream.Recv()
		if err != nil {
			recvErr = err
			break
		}
		for _, c := range b.GetCalls() {
			// One context per call, cancelled when the call ends: a
			// context derived and dropped would hang off the stream's,
			// which lives as long as the plugin.
			var (
				ctx    context.Context
				cancel context.CancelFunc
			)
			if d := c.GetTimeoutNanos(); d > 0 {
				ctx, cancel = context.WithTimeout(stream.Context(), time.Duration(d))
			} else {
				ctx, cancel = context.WithCancel(stream.Context())
			}
			mu.Lock()
			running[c.GetId()] = cancel
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := s.runCall(ctx, c)
				mu.Lock()
				delete(running, c.GetId())
				mu.Unlock()
				cancel()
				out.put(r)
			}()
		}
		mu.Lock()
		for _, id := range b.GetCancel() {
			if cancel, ok := running[id]; ok {
				cancel()
			}
		}
		mu.Unlock()
	}
	// On io.EOF the agent closed its side: the calls still running finish
	// and are answered. Otherwise the stream's context is done, and so is
	// every call's.
	wg.Wait()
	if err := out.failure(); err != nil {
		return err
	}
	if recvErr == io.EOF {
		return nil
	}
	return recvErr
}

// replyOutbox sends the replies of a Calls stream. The goroutine of a call
// that finishes while no message is being sent sends its reply itself,
// with those of the calls that finished with it, and then whatever replies
// became ready meanwhile, many to a message (up to wire.MaxBatchBytes), until
// none is left.
type replyOutbox struct {
	stream storepb.Store_CallsServer

	mu      sync.Mutex
	ready   []*storepb.Reply
	sending bool
	failed  error // the first failed send; later replies are dropped
}

func (o *replyOutbox) put(r *storepb.Reply) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ready = append(o.ready, r)
	if o.sending {
		return
	}
	o.sending = true
	// Let the goroutines that are ready to run go first: the calls one
	// commit finished together put their replies now, and share this
	// message instead of one each. With nothing else ready, this returns
	// at once.
	o.mu.Unlock()
	runtime.Gosched()
	o.mu.Lock()
	for len(o.ready) > 0 {
		batch := &storepb.ReplyBatch{}
		size := 0
		for len(o.ready) > 0 && (len(batch.Replies) == 0 || size < wire.MaxBatchBytes) {
			size += proto.Size(o.ready[0])
			batch.Replies = append(batch.Replies, o.ready[0])
			o.ready = o.ready[1:]
		}
		if o.failed != nil {
			continue
		}
		o.mu.Unlock()
		err := o.stream.Send(batch)
		o.mu.Lock()
		if err != nil {
			o.failed = err
		}
	}
	o.sending = false
}

func (o *replyOutbox) failure() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failed
}

// runCall runs one call as gRPC would run the unary RPC: the request is
// decoded, the handler runs, and its answer or its status is encoded, with
// gRPC's own errors for a request or an answer that cannot be.
func (s *server) runCall(ctx context.Context, c *storepb.Call) *storepb.Reply {
	h, ok := unaryHandlers[c.GetMethod()]
	if !ok {
		return statusReply(c.GetId(), status.Newf(codes.Unimplemented, "unknown method %s for service %s", c.GetMethod(), storepb.Store_ServiceDesc.ServiceName))
	}
	dec := func(v any) error {
		if err := proto.Unmarshal(c.GetRequest(), v.(proto.Message)); err != nil {
			return status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
		}
		return nil
	}
	out, err := h(s, ctx, dec, nil)
	if err != nil {
		return statusReply(c.GetId(), status.Convert(err))
	}
	b, err := proto.Marshal(out.(proto.Message))
	if err != nil {
		return statusReply(c.GetId(), status.Newf(codes.Internal, "grpc: error while marshaling: %v", err))
	}
	return &storepb.Reply{Id: c.GetId(), Reply: b}
}

// statusReply is a failed call's reply. A status that cannot be encoded
// (its message quotes a string that is not UTF-8) goes as gRPC sends it in
// that case: its code and its message, made valid, without details.
func statusReply(id uint64, st *status.Status) *storepb.Reply {
	b, err := proto.Marshal(st.Proto())
	if err != nil {
		b, _ = proto.Marshal(status.New(st.Code(), strings.ToValidUTF8(st.Message(), "\uFFFD")).Proto())
	}
	return &storepb.Reply{Id: id, Status: b}
}
