package mongotest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Clock is the time a ClockProxy reports as the server's. board.Clock and
// boardtest.ManualClock satisfy it.
type Clock interface {
	Now() time.Time
}

// SlowClock is a Clock whose reading is answered late: the inner clock is
// read when the server answers a hello, and then, while a delay is set
// (SetDelay), the reply is held back that long on the wire. The server's
// time does not move while the reply is held (a manual clock stands
// still), so the hello's round trip is pure uncertainty: the server read
// its clock as the request arrived.
type SlowClock struct {
	Clock Clock
	delay atomic.Int64 // a time.Duration
}

// SetDelay holds back every later hello reply by d (0: none).
func (c *SlowClock) SetDelay(d time.Duration) { c.delay.Store(int64(d)) }

// Now reads the inner clock, then waits out the delay.
func (c *SlowClock) Now() time.Time {
	now := c.Clock.Now()
	if d := time.Duration(c.delay.Load()); d > 0 {
		time.Sleep(d) // the server is slow to answer, not a synchronisation
	}
	return now
}

// ClockProxy starts a MongoDB wire proxy in front of the test server whose
// only change to the traffic is the server's clock: the localTime field of
// every hello / isMaster reply is rewritten to clock.Now(). It returns the
// connection string of the proxy; the proxy stops when the test ends.
//
// The MongoDB twin reads the server's time from hello.localTime and from
// nothing else (it stamps leases, claimed_at, updated_at and the epoch
// floor with it), so a test that points a store at this URI decides what
// time the "server" says it is: it can run the server's clock ahead of or
// behind the agents', or step it, without sleeping. Every other byte is
// forwarded unchanged, in both directions, one whole message at a time.
//
// How a reply is recognised: the proxy remembers the requestID of every
// hello / isMaster / ismaster command a client sends (OP_MSG, whose body
// section names the command first, or a legacy OP_QUERY on a $cmd
// collection) and rewrites the server message whose responseTo matches. A
// request flagged moreToCome gets no answer, so it is not remembered; an
// exhaust reply flagged moreToCome is followed by replies answering that
// reply's own requestID, which is remembered in its place. A rewritten
// message gets its length fixed (localTime is appended when the server
// sent none) and its CRC-32C recomputed when it carries one.
//
// The connection string keeps the options of the server's and adds
// directConnection=true, so a driver talks to the proxy only, even when the
// server behind it (LEASEKEEPER_TEST_MONGO_URI) is a replica-set member
// whose hello names other hosts.
func ClockProxy(t testing.TB, clock Clock) string {
	t.Helper()
	u, err := url.Parse(URI(t))
	if err != nil {
		t.Fatalf("mongotest: ClockProxy: parse the server URI: %v", err)
	}
	if strings.Contains(u.Host, ",") {
		t.Fatalf("mongotest: ClockProxy needs a single-host server URI, got hosts %q", u.Host)
	}
	p, err := startClockProxy(u.Host, clock)
	if err != nil {
		t.Fatalf("mongotest: ClockProxy: %v", err)
	}
	t.Cleanup(p.close)
	q := u.Query()
	q.Set("directConnection", "true")
	u.Host, u.RawQuery = p.ln.Addr().String(), q.Encode()
	if u.Path == "" {
		u.Path = "/"
	}
	return u.String()
}

// clockProxy is one listener and the connection pairs it forwards.
type clockProxy struct {
	backend string
	clock   Clock
	ln      net.Listener

	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func startClockProxy(backend string, clock Clock) (*clockProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &clockProxy{backend: backend, clock: clock, ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *clockProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(c)
		}()
	}
}

// track registers c so close can end it; false when the proxy is closing.
func (p *clockProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = true
	return true
}

func (p *clockProxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *clockProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}

func (p *clockProxy) handle(client net.Conn) {
	defer client.Close()
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	server, err := net.Dial("tcp", p.backend)
	if err != nil {
		return
	}
	defer server.Close()
	if !p.track(server) {
		return
	}
	defer p.untrack(server)

	// hellos holds the requestIDs whose answer carries the server clock.
	var (
		mu     sync.Mutex
		hellos = map[int32]bool{}
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer client.Close()
		defer server.Close()
		r := bufio.NewReader(server)
		for {
			msg, err := readWireMessage(r)
			if err != nil {
				return
			}
			mu.Lock()
			rewrite := hellos[wireResponseTo(msg)]
			if rewrite {
				delete(hellos, wireResponseTo(msg))
				if wireMoreToCome(msg) {
					// An exhaust stream: the next reply answers this one.
					hellos[wireRequestID(msg)] = true
				}
			}
			mu.Unlock()
			if rewrite {
				if out, err := rewriteLocalTime(msg, p.clock.Now()); err == nil {
					msg = out
				}
			}
			if _, err := client.Write(msg); err != nil {
				return
			}
		}
	}()
	r := bufio.NewReader(client)
	for {
		msg, err := readWireMessage(r)
		if err != nil {
			break
		}
		if isHelloRequest(msg) && !wireMoreToCome(msg) {
			mu.Lock()
			hellos[wireRequestID(msg)] = true
			mu.Unlock()
		}
		if _, err := server.Write(msg); err != nil {
			break
		}
	}
	_ = server.Close()
	<-done
}

// Wire protocol constants (MongoDB wire protocol, "Standard Message Header").
const (
	wireHeaderLen = 16
	wireOpReply   = 1
	wireOpQuery   = 2004
	wireOpMsg     = 2013

	// OP_MSG flag bits: a checksum follows the sections; the sender will
	// not wait for a reply (a request) or more replies follow (a reply).
	wireChecksumPresent = 1 << 0
	wireMoreToComeFlag  = 1 << 1

	wireMaxMessage = 48 << 20
)

func readWireMessage(r io.Reader) ([]byte, error) {
	var hdr [wireHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(int32(binary.LittleEndian.Uint32(hdr[0:4])))
	if n < wireHeaderLen || n > wireMaxMessage {
		return nil, fmt.Errorf("bad message length %d", n)
	}
	msg := make([]byte, n)
	copy(msg, hdr[:])
	if _, err := io.ReadFull(r, msg[wireHeaderLen:]); err != nil {
		return nil, err
	}
	return msg, nil
}

func wireRequestID(msg []byte) int32  { return int32(binary.LittleEndian.Uint32(msg[4:8])) }
func wireResponseTo(msg []byte) int32 { return int32(binary.LittleEndian.Uint32(msg[8:12])) }
func wireOpCode(msg []byte) int32     { return int32(binary.LittleEndian.Uint32(msg[12:16])) }

func wireMsgFlags(msg []byte) uint32 {
	if wireOpCode(msg) != wireOpMsg || len(msg) < wireHeaderLen+4 {
		return 0
	}
	return binary.LittleEndian.Uint32(msg[wireHeaderLen : wireHeaderLen+4])
}

func wireMoreToCome(msg []byte) bool { return wireMsgFlags(msg)&wireMoreToComeFlag != 0 }

// isHelloCommand reports whether a command document names hello or one of
// its legacy spellings first (the command name is always the first key).
func isHelloCommand(doc bson.Raw) bool {
	els, err := doc.Elements()
	if err != nil || len(els) == 0 {
		return false
	}
	switch strings.ToLower(els[0].Key()) {
	case "hello", "ismaster":
		return true
	case "$query":
		if sub, ok := els[0].Value().DocumentOK(); ok {
			return isHelloCommand(sub)
		}
	}
	return false
}

// isHelloRequest reports whether msg is a hello / isMaster command.
func isHelloRequest(msg []byte) bool {
	switch wireOpCode(msg) {
	case wireOpMsg:
		body, _, ok := msgBody(msg)
		return ok && isHelloCommand(body)
	case wireOpQuery:
		// flags int32, fullCollectionName cstring, numberToSkip int32,
		// numberToReturn int32, query document.
		rest := msg[wireHeaderLen:]
		if len(rest) < 4 {
			return false
		}
		rest = rest[4:]
		i := indexByte(rest, 0)
		if i < 0 || !strings.HasSuffix(string(rest[:i]), ".$cmd") {
			return false
		}
		rest = rest[i+1:]
		if len(rest) < 8 {
			return false
		}
		doc, ok := readDoc(rest[8:])
		return ok && isHelloCommand(doc)
	}
	return false
}

// msgBody finds the OP_MSG body section (kind 0): its document and where
// the document starts in msg.
func msgBody(msg []byte) (bson.Raw, int, bool) {
	end := len(msg)
	if wireMsgFlags(msg)&wireChecksumPresent != 0 {
		end -= 4
	}
	off := wireHeaderLen + 4
	for off < end {
		kind := msg[off]
		off++
		switch kind {
		case 0:
			doc, ok := readDoc(msg[off:end])
			return doc, off, ok
		case 1:
			if off+4 > end {
				return nil, 0, false
			}
			n := int(int32(binary.LittleEndian.Uint32(msg[off : off+4])))
			if n < 4 || off+n > end {
				return nil, 0, false
			}
			off += n
		default:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// readDoc reads one length-prefixed BSON document at the start of b.
func readDoc(b []byte) (bson.Raw, bool) {
	if len(b) < 5 {
		return nil, false
	}
	n := int(int32(binary.LittleEndian.Uint32(b[0:4])))
	if n < 5 || n > len(b) {
		return nil, false
	}
	doc := bson.Raw(b[:n])
	if doc.Validate() != nil {
		return nil, false
	}
	return doc, true
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

var errNoReplyDocument = errors.New("no reply document")

// rewriteLocalTime returns msg with the localTime of its reply document set
// to now (appended when absent), the message length fixed and, for an
// OP_MSG that carries one, the checksum recomputed. It handles OP_MSG (the
// body section) and OP_REPLY (the first document, the legacy handshake's
// answer).
func rewriteLocalTime(msg []byte, now time.Time) ([]byte, error) {
	var (
		doc bson.Raw
		at  int
		ok  bool
	)
	switch wireOpCode(msg) {
	case wireOpMsg:
		doc, at, ok = msgBody(msg)
	case wireOpReply:
		// responseFlags int32, cursorID int64, startingFrom int32,
		// numberReturned int32, then the documents.
		at = wireHeaderLen + 20
		if len(msg) > at {
			doc, ok = readDoc(msg[at:])
		}
	}
	if !ok {
		return nil, errNoReplyDocument
	}
	newDoc, err := withLocalTime(doc, now)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(msg)-len(doc)+len(newDoc))
	out = append(out, msg[:at]...)
	out = append(out, newDoc...)
	out = append(out, msg[at+len(doc):]...)
	binary.LittleEndian.PutUint32(out[0:4], uint32(len(out)))
	if wireMsgFlags(out)&wireChecksumPresent != 0 {
		sum := crc32.Checksum(out[:len(out)-4], crc32.MakeTable(crc32.Castagnoli))
		binary.LittleEndian.PutUint32(out[len(out)-4:], sum)
	}
	return out, nil
}

// withLocalTime rebuilds doc with localTime set to now as a BSON date
// (milliseconds), every other element copied byte for byte.
func withLocalTime(doc bson.Raw, now time.Time) (bson.Raw, error) {
	els, err := doc.Elements()
	if err != nil {
		return nil, err
	}
	var date [8]byte
	binary.LittleEndian.PutUint64(date[:], uint64(now.UnixMilli()))
	elem := append([]byte{byte(bson.TypeDateTime)}, "localTime\x00"...)
	elem = append(elem, date[:]...)

	out := make([]byte, 4, len(doc)+len(elem))
	found := false
	for _, e := range els {
		if e.Key() == "localTime" {
			out = append(out, elem...)
			found = true
			continue
		}
		out = append(out, e...)
	}
	if !found {
		out = append(out, elem...)
	}
	out = append(out, 0)
	binary.LittleEndian.PutUint32(out[0:4], uint32(len(out)))
	return bson.Raw(out), nil
}
