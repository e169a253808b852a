// Command ferretserver is the MongoDB-wire server leasekeeper's tests talk
// to on a machine with no MongoDB: an embedded FerretDB (SQLite backend)
// behind a serializing wire proxy.
//
// It lives in its own Go module so FerretDB's dependency tree never reaches
// the leasekeeper module, and it is built without the race detector (FerretDB
// compiles and runs slowly under it); the tests that use it keep -race on
// leasekeeper's own code.
//
// Why the proxy: FerretDB v1 runs findAndModify and update as read, modify in
// Go, write back by _id, without re-checking the filter, so two concurrent
// compare-and-set updates can both "win". Real MongoDB guarantees that a
// single-document update is atomic, and the leasekeeper MongoDB twin relies
// on exactly that and nothing more. Forwarding one whole request/response
// exchange at a time per database across all client connections restores
// that guarantee, so a test against this server means what it would mean
// against MongoDB; requests on different databases (each test has its own)
// run side by side.
//
// The program prints one line "LISTEN host:port" on stdout once it accepts
// connections, and exits when its standard input closes (so it never
// outlives the test process that started it) or on SIGTERM / SIGINT.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "loopback address the proxy listens on")
	dataDir := flag.String("dir", "", "SQLite data directory (default: a temporary directory removed on exit)")
	logLevel := flag.String("log", "error", "FerretDB log level: debug, info, warn or error")
	flag.Parse()

	// FerretDB allocates a document tree per document it reads; with the
	// default GOGC a tenth of the server's CPU went to collecting them.
	// A test's data is small, so trade memory for it (GOGC still wins).
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}

	// FERRETSERVER_CPUPROFILE names a file for a CPU profile of the whole
	// run, written when the server stops: where the tests' MongoDB time
	// goes.
	if path := os.Getenv("FERRETSERVER_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ferretserver:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "ferretserver:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}

	if err := run(*listen, *dataDir, *logLevel); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "ferretserver:", err)
		os.Exit(1)
	}
}

func run(listen, dataDir, logLevel string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// The parent holds our stdin open for as long as it wants us; when it
	// exits (even by SIGKILL) the pipe closes and we stop with it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()

	if dataDir == "" {
		dir, err := os.MkdirTemp("", "ferretserver-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		dataDir = dir
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return fmt.Errorf("bad -log: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	fdb, err := ferretdb.New(&ferretdb.Config{
		Listener: ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		Logger:   logger,
		Handler:  "sqlite",
		// No fsync: the data is a test's, in a directory removed on exit.
		// A write still reaches the file before its reply, so a server
		// killed mid-test loses nothing its clients were told had landed;
		// only a machine crash could, and it ends the test anyway.
		SQLiteURL: (&url.URL{Scheme: "file", Path: dataDir + "/", RawQuery: "_pragma=synchronous(off)"}).String(),
	})
	if err != nil {
		return fmt.Errorf("start ferretdb: %w", err)
	}
	fdbDone := make(chan error, 1)
	go func() { fdbDone <- fdb.Run(ctx) }()

	// MongoDBURI waits until FerretDB's listener is bound.
	u, err := url.Parse(fdb.MongoDBURI())
	if err != nil {
		return fmt.Errorf("ferretdb uri: %w", err)
	}
	backend := u.Host

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	p := &proxy{backend: backend, logger: logger}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	fmt.Printf("LISTEN %s\n", ln.Addr())

	p.serve(ctx, ln)
	p.wg.Wait()
	cancel()
	return <-fdbDone
}

// Wire protocol constants (MongoDB wire protocol, "Standard Message Header").
const (
	headerLen    = 16
	opReply      = 1
	opQuery      = 2004
	opCompressed = 2012
	opMsg        = 2013

	// msgMoreToCome is OP_MSG flag bit 1: the sender will not wait for (a
	// request) or is followed by more (a reply) messages.
	msgMoreToCome = 1 << 1

	// maxMessage bounds one message; MongoDB's own limit is 48 MB.
	maxMessage = 48 << 20
)

// proxy forwards client connections to FerretDB, one exchange at a time
// per database.
type proxy struct {
	backend string
	logger  *slog.Logger

	// A request's turn is held from the moment it is written to FerretDB
	// until its whole reply has been read back, across ALL connections:
	// the turn of its database (its "$db"), with every database's turn
	// open (all shared); or, for a request whose database the proxy does
	// not read (a legacy OP_QUERY, a compressed message), all of them
	// (all exclusive). So no two requests on one database ever run on the
	// server at once, and FerretDB's read-modify-write updates, each
	// within one collection of one database, cannot interleave. Requests
	// on different databases share no document (each test has databases
	// of its own), and run side by side.
	all sync.RWMutex
	mu  sync.Mutex
	dbs map[string]*sync.Mutex
	wg  sync.WaitGroup
}

// turn waits for req's turn and returns the function that ends it.
func (p *proxy) turn(req []byte) (done func()) {
	db, ok := databaseOf(req)
	if !ok {
		p.all.Lock()
		return p.all.Unlock
	}
	p.all.RLock()
	p.mu.Lock()
	if p.dbs == nil {
		p.dbs = map[string]*sync.Mutex{}
	}
	m := p.dbs[db]
	if m == nil {
		m = &sync.Mutex{}
		p.dbs[db] = m
	}
	p.mu.Unlock()
	m.Lock()
	return func() {
		m.Unlock()
		p.all.RUnlock()
	}
}

func (p *proxy) serve(ctx context.Context, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(ctx, c)
		}()
	}
}

func (p *proxy) handle(ctx context.Context, client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.backend)
	if err != nil {
		p.logger.Error("dial ferretdb", "err", err)
		return
	}
	defer server.Close()
	stop := context.AfterFunc(ctx, func() {
		client.Close()
		server.Close()
	})
	defer stop()

	cr := bufio.NewReader(client)
	sr := bufio.NewReader(server)
	for {
		// Read the whole request before taking the turn, so a slow client
		// never holds up the others.
		req, err := readMessage(cr)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				p.logger.Debug("read request", "err", err)
			}
			return
		}
		replies, more, err := p.exchange(server, sr, req)
		if err != nil {
			p.logger.Debug("exchange", "err", err)
			return
		}
		for _, r := range replies {
			if _, err := client.Write(r); err != nil {
				return
			}
		}
		// An exhaust reply (moreToCome on a reply) is followed by further
		// replies the server sends on its own schedule, with no request in
		// between (an awaitable hello can wait seconds). They are relayed
		// outside the turn: they change no data, and holding the turn while
		// the server waits would stall every other connection.
		for more {
			r, err := readMessage(sr)
			if err != nil {
				return
			}
			more = replyMoreToCome(r)
			if _, err := client.Write(r); err != nil {
				return
			}
		}
	}
}

// exchange sends one request and reads its reply while holding the turn.
// A request flagged moreToCome gets no reply, so none is awaited.
func (p *proxy) exchange(server net.Conn, sr *bufio.Reader, req []byte) (replies [][]byte, more bool, err error) {
	defer p.turn(req)()
	// A deadline keeps a wedged backend from holding the turn forever.
	_ = server.SetDeadline(time.Now().Add(2 * time.Minute))
	defer server.SetDeadline(time.Time{})
	if _, err := server.Write(req); err != nil {
		return nil, false, err
	}
	if !expectsReply(req) {
		return nil, false, nil
	}
	for {
		r, err := readMessage(sr)
		if err != nil {
			return nil, false, err
		}
		// FerretDB answers even a moreToCome request, which its sender
		// never reads. Such a stray answer is the only reply on this
		// connection that is not responding to the request in flight, so
		// it is dropped here instead of being handed to the client as the
		// answer to a later request.
		if responseTo(r) != requestID(req) {
			continue
		}
		return [][]byte{r}, replyMoreToCome(r), nil
	}
}

// readMessage reads one length-prefixed wire message.
func readMessage(r *bufio.Reader) ([]byte, error) {
	var hdr [headerLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(int32(binary.LittleEndian.Uint32(hdr[0:4])))
	if n < headerLen || n > maxMessage {
		return nil, fmt.Errorf("bad message length %d", n)
	}
	msg := make([]byte, n)
	copy(msg, hdr[:])
	if _, err := io.ReadFull(r, msg[headerLen:]); err != nil {
		return nil, err
	}
	return msg, nil
}

func requestID(msg []byte) int32  { return int32(binary.LittleEndian.Uint32(msg[4:8])) }
func responseTo(msg []byte) int32 { return int32(binary.LittleEndian.Uint32(msg[8:12])) }
func opCode(msg []byte) int32     { return int32(binary.LittleEndian.Uint32(msg[12:16])) }

func msgFlags(msg []byte) uint32 {
	if len(msg) < headerLen+4 {
		return 0
	}
	return binary.LittleEndian.Uint32(msg[headerLen : headerLen+4])
}

// expectsReply reports whether the server answers this request. OP_MSG
// answers unless moreToCome is set (an unacknowledged write); OP_QUERY
// (the legacy handshake) and OP_COMPRESSED (never negotiated here: the
// driver only compresses when asked to) always answer. The legacy
// fire-and-forget opcodes are not sent by current drivers; treating them as
// answered would wedge the connection, so they are treated as unanswered.
func expectsReply(req []byte) bool {
	switch opCode(req) {
	case opMsg:
		return msgFlags(req)&msgMoreToCome == 0
	case opQuery, opCompressed:
		return true
	default:
		return false
	}
}

// replyMoreToCome reports an exhaust reply: more replies follow unasked.
func replyMoreToCome(reply []byte) bool {
	return opCode(reply) == opMsg && msgFlags(reply)&msgMoreToCome != 0
}

// databaseOf reads the "$db" of an OP_MSG request: the string field of
// that name in its body (the section of kind 0). ok is false for any other
// message, and for one the proxy cannot read to the end of that field.
func databaseOf(msg []byte) (db string, ok bool) {
	if opCode(msg) != opMsg || len(msg) < headerLen+4 {
		return "", false
	}
	b := msg[headerLen+4:]
	for len(b) > 0 {
		kind := b[0]
		b = b[1:]
		if len(b) < 4 {
			return "", false
		}
		n := int(int32(binary.LittleEndian.Uint32(b)))
		if n < 4 || n > len(b) {
			return "", false
		}
		if kind == 0 {
			return stringField(b[:n], "$db")
		}
		if kind != 1 {
			return "", false
		}
		b = b[n:] // a document sequence: its size prefix covers it all
	}
	return "", false
}

// stringField finds the top-level string field key of the BSON document
// doc.
func stringField(doc []byte, key string) (string, bool) {
	if len(doc) < 5 {
		return "", false
	}
	b := doc[4 : len(doc)-1] // the elements, between the size and the 0
	for len(b) > 0 {
		typ := b[0]
		end := 1
		for end < len(b) && b[end] != 0 {
			end++
		}
		if end == len(b) {
			return "", false
		}
		name := string(b[1:end])
		b = b[end+1:]
		size, ok := bsonValueSize(typ, b)
		if !ok || size > len(b) {
			return "", false
		}
		if name == key {
			if typ != 0x02 {
				return "", false
			}
			return string(b[4 : size-1]), true
		}
		b = b[size:]
	}
	return "", false
}

// bsonValueSize is the size of a BSON value of type typ at the start of b.
func bsonValueSize(typ byte, b []byte) (int, bool) {
	prefixed := func(extra int) (int, bool) { // an int32 length first
		if len(b) < 4 {
			return 0, false
		}
		n := int(int32(binary.LittleEndian.Uint32(b)))
		if n < 0 {
			return 0, false
		}
		return n + extra, true
	}
	cstring := func(from int) (int, bool) {
		for i := from; i < len(b); i++ {
			if b[i] == 0 {
				return i + 1, true
			}
		}
		return 0, false
	}
	switch typ {
	case 0x01, 0x09, 0x11, 0x12: // double, datetime, timestamp, int64
		return 8, true
	case 0x02, 0x0D, 0x0E: // string, JavaScript, symbol
		n, ok := prefixed(4)
		if ok && n < 5 {
			return 0, false
		}
		return n, ok
	case 0x03, 0x04, 0x0F: // document, array, code with scope: size includes itself
		return prefixed(0)
	case 0x05: // binary: size, subtype, bytes
		return prefixed(5)
	case 0x06, 0x0A, 0xFF, 0x7F: // undefined, null, min key, max key
		return 0, true
	case 0x07: // ObjectId
		return 12, true
	case 0x08: // bool
		return 1, true
	case 0x0B: // regex: two cstrings
		n, ok := cstring(0)
		if !ok {
			return 0, false
		}
		return cstring(n)
	case 0x0C: // DBPointer: string, ObjectId
		n, ok := prefixed(4 + 12)
		return n, ok
	case 0x10: // int32
		return 4, true
	case 0x13: // decimal128
		return 16, true
	default:
		return 0, false
	}
}
