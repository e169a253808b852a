package plugins

import (
	"context"
	"fmt"
	"path"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/leasekeeper/leasekeeper/board"
)

// sendableConn is the agent's end of the connection to the plugin. Before
// each call it checks the request can be encoded at all: a protobuf string
// must be UTF-8, and gRPC would fail a request carrying other bytes in this
// process, before sending anything, with an error that looks like a broken
// call. A name that is not UTF-8 is the caller's mistake — any peer of the
// socket can send one — so it is refused here the way the store refuses a
// malformed name, board.ErrInvalidArgument, and the plugin, which never saw
// the request, is left alone.
type sendableConn struct {
	grpc.ClientConnInterface
}

func (c sendableConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if m, ok := args.(proto.Message); ok {
		if field, bad := invalidUTF8(m.ProtoReflect()); bad {
			return toStatus(board.Invalid("%s: %s is not valid UTF-8; the request was not sent to the store plugin",
				path.Base(method), field))
		}
	}
	return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
}

// invalidUTF8 finds a string of m, at any depth, that is not valid UTF-8,
// and names the field that holds it ("holds[2].card").
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
