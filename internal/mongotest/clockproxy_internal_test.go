package mongotest

import (
	"bufio"
	"encoding/binary"
	"hash/crc32"
	"net"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The byte-level half of the clock proxy, on messages built by hand: the
// shapes a driver seldom or never sends to the test server (a legacy
// OP_QUERY handshake, a checksummed OP_MSG, a reply without localTime).

func mustDoc(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func header(requestID, responseTo, op int32) []byte {
	h := make([]byte, wireHeaderLen)
	binary.LittleEndian.PutUint32(h[4:8], uint32(requestID))
	binary.LittleEndian.PutUint32(h[8:12], uint32(responseTo))
	binary.LittleEndian.PutUint32(h[12:16], uint32(op))
	return h
}

func finish(msg []byte) []byte {
	binary.LittleEndian.PutUint32(msg[0:4], uint32(len(msg)))
	return msg
}

// opMsg builds an OP_MSG with a document-sequence section before the body
// (so the body is not at a fixed offset) and, when checksum is set, a
// CRC-32C trailer.
func opMsg(t *testing.T, requestID, responseTo int32, flags uint32, body bson.D, checksum bool) []byte {
	t.Helper()
	if checksum {
		flags |= wireChecksumPresent
	}
	msg := header(requestID, responseTo, wireOpMsg)
	msg = binary.LittleEndian.AppendUint32(msg, flags)
	seqDoc := mustDoc(t, bson.D{{Key: "x", Value: 1}})
	seq := binary.LittleEndian.AppendUint32(nil, uint32(4+len("documents\x00")+len(seqDoc)))
	seq = append(append(seq, "documents\x00"...), seqDoc...)
	msg = append(append(msg, 1), seq...)
	msg = append(append(msg, 0), mustDoc(t, body)...)
	if checksum {
		msg = append(msg, 0, 0, 0, 0)
	}
	msg = finish(msg)
	if checksum {
		binary.LittleEndian.PutUint32(msg[len(msg)-4:], crc32.Checksum(msg[:len(msg)-4], crc32.MakeTable(crc32.Castagnoli)))
	}
	return msg
}

func opQuery(t *testing.T, requestID int32, coll string, q bson.D) []byte {
	t.Helper()
	msg := header(requestID, 0, wireOpQuery)
	msg = binary.LittleEndian.AppendUint32(msg, 0)
	msg = append(append(msg, coll...), 0)
	msg = binary.LittleEndian.AppendUint32(msg, 0)
	msg = binary.LittleEndian.AppendUint32(msg, uint32(0xffffffff)) // -1
	msg = append(msg, mustDoc(t, q)...)
	return finish(msg)
}

func opReply(t *testing.T, responseTo int32, doc bson.D) []byte {
	t.Helper()
	msg := header(9, responseTo, wireOpReply)
	msg = append(msg, make([]byte, 20)...)
	binary.LittleEndian.PutUint32(msg[wireHeaderLen+16:], 1)
	msg = append(msg, mustDoc(t, doc)...)
	return finish(msg)
}

func TestIsHelloRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  []byte
		want bool
	}{
		{"op_msg hello", opMsg(t, 1, 0, 0, bson.D{{Key: "hello", Value: 1}, {Key: "$db", Value: "admin"}}, false), true},
		{"op_msg isMaster", opMsg(t, 1, 0, 0, bson.D{{Key: "isMaster", Value: 1}}, true), true},
		{"op_msg legacy ismaster", opMsg(t, 1, 0, 0, bson.D{{Key: "ismaster", Value: 1}}, false), true},
		{"op_msg find", opMsg(t, 1, 0, 0, bson.D{{Key: "find", Value: "cards"}, {Key: "hello", Value: 1}}, false), false},
		{"op_query isMaster", opQuery(t, 1, "admin.$cmd", bson.D{{Key: "isMaster", Value: 1}}), true},
		{"op_query wrapped", opQuery(t, 1, "admin.$cmd", bson.D{{Key: "$query", Value: bson.D{{Key: "hello", Value: 1}}}}), true},
		{"op_query on a collection", opQuery(t, 1, "db.cards", bson.D{{Key: "isMaster", Value: 1}}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := isHelloRequest(tc.msg); got != tc.want {
				t.Errorf("isHelloRequest = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRewriteLocalTime(t *testing.T) {
	at := time.Date(2031, 5, 6, 7, 8, 9, 123_000_000, time.UTC)
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"op_msg", opMsg(t, 5, 4, 0, bson.D{{Key: "isWritablePrimary", Value: true}, {Key: "localTime", Value: old}, {Key: "ok", Value: 1.0}}, false)},
		{"op_msg with checksum", opMsg(t, 5, 4, 0, bson.D{{Key: "localTime", Value: old}, {Key: "ok", Value: 1.0}}, true)},
		{"op_msg without localTime", opMsg(t, 5, 4, 0, bson.D{{Key: "ok", Value: 1.0}}, false)},
		{"op_msg exhaust", opMsg(t, 5, 4, wireMoreToComeFlag, bson.D{{Key: "localTime", Value: old}}, false)},
		{"op_reply", opReply(t, 4, bson.D{{Key: "ismaster", Value: true}, {Key: "localTime", Value: old}, {Key: "ok", Value: 1.0}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := rewriteLocalTime(tc.msg, at)
			if err != nil {
				t.Fatalf("rewriteLocalTime: %v", err)
			}
			if got := int(binary.LittleEndian.Uint32(out[0:4])); got != len(out) {
				t.Errorf("message length field = %d, want %d", got, len(out))
			}
			if wireRequestID(out) != wireRequestID(tc.msg) || wireResponseTo(out) != wireResponseTo(tc.msg) || wireOpCode(out) != wireOpCode(tc.msg) {
				t.Errorf("header changed: %x, was %x", out[:wireHeaderLen], tc.msg[:wireHeaderLen])
			}
			if got, want := wireMsgFlags(out), wireMsgFlags(tc.msg); got != want {
				t.Errorf("flags = %#x, want %#x", got, want)
			}
			var doc bson.Raw
			if wireOpCode(out) == wireOpMsg {
				var ok bool
				doc, _, ok = msgBody(out)
				if !ok {
					t.Fatal("no body section after the rewrite")
				}
				if wireMsgFlags(out)&wireChecksumPresent != 0 {
					want := crc32.Checksum(out[:len(out)-4], crc32.MakeTable(crc32.Castagnoli))
					if got := binary.LittleEndian.Uint32(out[len(out)-4:]); got != want {
						t.Errorf("checksum = %#x, want %#x", got, want)
					}
				}
			} else {
				var ok bool
				doc, ok = readDoc(out[wireHeaderLen+20:])
				if !ok {
					t.Fatal("no reply document after the rewrite")
				}
			}
			ms, ok := doc.Lookup("localTime").DateTimeOK()
			if !ok || ms != at.UnixMilli() {
				t.Errorf("localTime = %d (present %v), want %d", ms, ok, at.UnixMilli())
			}
			// Every other field is untouched.
			orig := doc
			if wireOpCode(tc.msg) == wireOpMsg {
				orig, _, _ = msgBody(tc.msg)
			} else {
				orig, _ = readDoc(tc.msg[wireHeaderLen+20:])
			}
			origEls, _ := orig.Elements()
			for _, e := range origEls {
				if e.Key() == "localTime" {
					continue
				}
				if got := doc.Lookup(e.Key()); !got.Equal(e.Value()) {
					t.Errorf("field %s = %v, want %v", e.Key(), got, e.Value())
				}
			}
		})
	}
}

// TestClockProxyFollowsExhaustReplies drives the proxy against a scripted
// backend: a hello answered by an exhaust stream (each reply flagged
// moreToCome answers the reply before it, not the request) has every reply
// of the stream rewritten, and a non-hello reply that happens to carry a
// localTime is left alone.
func TestClockProxyFollowsExhaustReplies(t *testing.T) {
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	at := time.Date(2034, 2, 3, 4, 5, 6, 0, time.UTC)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		for {
			req, err := readWireMessage(r)
			if err != nil {
				return
			}
			body := bson.D{{Key: "localTime", Value: old}, {Key: "ok", Value: 1.0}}
			if !isHelloRequest(req) {
				_, _ = c.Write(opMsg(t, 50, wireRequestID(req), 0, body, false))
				continue
			}
			// An exhaust stream of three replies.
			_, _ = c.Write(opMsg(t, 100, wireRequestID(req), wireMoreToComeFlag, body, false))
			_, _ = c.Write(opMsg(t, 101, 100, wireMoreToComeFlag, body, false))
			_, _ = c.Write(opMsg(t, 102, 101, 0, body, false))
		}
	}()
	p, err := startClockProxy(ln.Addr().String(), fixedClock(at))
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	c, err := net.Dial("tcp", p.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	localTime := func(msg []byte) time.Time {
		t.Helper()
		doc, _, ok := msgBody(msg)
		if !ok {
			t.Fatalf("reply without a body: %x", msg)
		}
		return time.UnixMilli(doc.Lookup("localTime").DateTime()).UTC()
	}

	if _, err := c.Write(opMsg(t, 7, 0, 0, bson.D{{Key: "find", Value: "x"}}, false)); err != nil {
		t.Fatal(err)
	}
	reply, err := readWireMessage(r)
	if err != nil {
		t.Fatal(err)
	}
	if got := localTime(reply); !got.Equal(old) {
		t.Errorf("non-hello reply localTime = %s, want the server's %s untouched", got, old)
	}

	if _, err := c.Write(opMsg(t, 8, 0, 1<<16, bson.D{{Key: "hello", Value: 1}}, false)); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		reply, err := readWireMessage(r)
		if err != nil {
			t.Fatalf("exhaust reply %d: %v", i, err)
		}
		if got := localTime(reply); !got.Equal(at) {
			t.Errorf("exhaust reply %d localTime = %s, want %s", i, got, at)
		}
	}

	// The stream ended; an ordinary command afterwards is not rewritten.
	if _, err := c.Write(opMsg(t, 9, 0, 0, bson.D{{Key: "find", Value: "x"}}, false)); err != nil {
		t.Fatal(err)
	}
	if reply, err = readWireMessage(r); err != nil {
		t.Fatal(err)
	}
	if got := localTime(reply); !got.Equal(old) {
		t.Errorf("reply after the stream localTime = %s, want %s", got, old)
	}
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }
