package plugins

import (
	"context"
	"fmt"
	"path"
	"sync/atomic"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
)

// sendableConn is the agent's end of the connection to the plugin. gRPC
// fails a request it cannot encode — a protobuf string must be UTF-8 — in
// this process, before the request is sent, with an error that reads like
// any failed call. A name that is not UTF-8 is the caller's mistake (any
// peer of the socket can send one), so such a request is refused the way
// the store refuses a malformed name, board.ErrInvalidArgument, and the
// plugin, which never saw it, is left alone.
//
// Each call's encoder is watched rather than each request checked up front:
// gRPC encodes the request anyway, so the check costs nothing until one
// fails, and the failure is known to be this side's for certain, whatever
// words gRPC puts in its error.
type sendableConn struct {
	grpc.ClientConnInterface
}

func (c sendableConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	enc := &encodeWatch{CodecV2: encoding.GetCodecV2(protoCodec)}
	err := c.ClientConnInterface.Invoke(ctx, method, args, reply, append(opts, grpc.ForceCodecV2(enc))...)
	if err == nil || !enc.failed.Load() {
		return err
	}
	what := "a string that is not valid UTF-8"
	if m, ok := args.(proto.Message); ok {
		if field, bad := invalidUTF8(m.ProtoReflect()); bad {
			what = field + " is not valid UTF-8"
		}
	}
	return wire.ToStatus(board.Invalid("%s: %s; the request could not be sent to the store plugin (%v)",
		path.Base(method), what, status.Convert(err).Message()))
}

// protoCodec is the name of gRPC's protobuf codec, which is also the
// content-subtype a call forcing it announces, so the plugin decodes the
// request with its own protobuf codec as it would by default.
const protoCodec = "proto"

// encodeWatch is gRPC's protobuf codec, noting whether it failed to encode
// the request. One serves one call.
type encodeWatch struct {
	encoding.CodecV2
	failed atomic.Bool
}

func (w *encodeWatch) Marshal(v any) (mem.BufferSlice, error) {
	out, err := w.CodecV2.Marshal(v)
	if err != nil {
		w.failed.Store(true)
	}
	return out, err
}

// invalidUTF8 finds a string of m, at any depth, that is not valid UTF-8,
// and names the field that holds it ("holds[2].card"), so the refusal says
// which value was wrong.
func invalidUTF8(m protoreflect.Message) (field string, found bool) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := string(fd.Name())
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if sub, bad := invalidValue(fd, l.Get(i)); bad {
					field, found = fmt.Sprintf("%s[%d]%s", name, i, sub), true
					break
				}
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if ks, isString := k.Interface().(string); isString && !utf8.ValidString(ks) {
					field, found = name+" key", true
				} else if sub, bad := invalidValue(fd.MapValue(), mv); bad {
					field, found = fmt.Sprintf("%s[%v]%s", name, k.Interface(), sub), true
				}
				return !found
			})
		default:
			if sub, bad := invalidValue(fd, v); bad {
				field, found = name+sub, true
			}
		}
		return !found
	})
	return field, found
}

// invalidValue checks one value of a field of kind fd: a string itself, or
// every string of a message (sub names its field, dotted).
func invalidValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) (sub string, found bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return "", !utf8.ValidString(v.String())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if f, bad := invalidUTF8(v.Message()); bad {
			return "." + f, true
		}
	}
	return "", false
}
