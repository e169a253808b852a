package mongostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/leasekeeper/leasekeeper/board"
)

const (
	collCards  = "cards"
	collRuns   = "runs"
	collEvents = "events"

	// DefaultUnleasedHorizon is how long a claim with no lease must have
	// gone without an update before the candidate listing offers it
	// (DESIGN.md#unleased-arm: a missing lease is an absence, not evidence that a
	// heartbeat stopped, so it gets a much longer horizon than a lease).
	DefaultUnleasedHorizon = 24 * time.Hour
	// DefaultEventLag is Options.EventLag's default.
	DefaultEventLag = time.Second
	// DefaultLease is the lease the horizon is checked against when
	// Options.Lease is zero (the product default).
	DefaultLease = 30 * time.Second

	// maxAttempts bounds every compare-and-set retry loop. Each miss means
	// another writer's update landed, so the loop only spins under real
	// contention; the bound turns a pathological storm into an error
	// instead of a hang.
	maxAttempts = 1000
)

// Options configures Open.
type Options struct {
	// URI is the MongoDB connection string (required).
	URI string
	// Database is the database name (required).
	Database string
	// Board is the board of states the database is seeded with when it
	// holds no definition yet; the zero value means
	// board.DefaultBoard(false), the fleet variant. Once a definition is
	// stored it wins (Store.Board returns it).
	Board board.Board
	// Clock measures only how long ago the store read the server's clock,
	// to age that reading for at most a second (DESIGN.md#twin-clock);
	// every time this twin writes comes from the server
	// (DESIGN.md#store-clock), never from this clock's reading. Production
	// passes nil, board.SystemClock{}, whose differences are monotonic. A
	// test that simulates time passes the clock it advances.
	Clock board.Clock
	// Lease is the agent's claim lease, used only to validate
	// UnleasedHorizon; 0 means DefaultLease.
	Lease time.Duration
	// UnleasedHorizon: see DefaultUnleasedHorizon; 0 means the default. A
	// horizon shorter than one lease is a configuration error: it would
	// offer a live but un-leased claim before its own holder could notice.
	UnleasedHorizon time.Duration
	// WriteConcern defaults to majority, so an acknowledged claim survives
	// a primary failover (a claim that rolls back would hand the card out
	// twice).
	WriteConcern *writeconcern.WriteConcern
	// EventLag is how far behind the server's clock Events readers stop
	// (DESIGN.md#event-log): two writes to different documents can become
	// visible in the opposite order of their server stamps for as long as
	// a write takes from its stamp to its commit, and the lag must cover
	// that. 0 means DefaultEventLag; a negative lag means none, which is
	// exact only on a server that applies one command at a time (the
	// project's test server).
	EventLag time.Duration
	// Monitor, when set, sees every command the driver sends (metrics,
	// tracing, and the tests that pin how many round trips a verb takes).
	Monitor *event.CommandMonitor
}

// Store is the MongoDB twin of board.Store.
type Store struct {
	client   *mongo.Client
	db       *mongo.Database
	cards    *mongo.Collection
	runs     *mongo.Collection
	events   *mongo.Collection
	meta     *mongo.Collection
	reapers  *mongo.Collection
	clock    board.Clock
	horizon  time.Duration
	eventLag time.Duration

	// clkMu guards the last server-clock reading (see readClock).
	clkMu sync.Mutex
	clk   clockReading

	// stop ends the background compactor; compacted is closed when it has.
	stop      context.CancelFunc
	compacted chan struct{}

	// reapersMu guards ownReapers, the reapers this store recorded as live
	// (see reapers.go), which Close retires.
	reapersMu  sync.Mutex
	ownReapers []string

	// boardMu guards the cached board definition (see board.go).
	boardMu sync.Mutex
	board   board.Board
	boardAt time.Time
}

var _ board.Store = (*Store)(nil)

// Open connects, checks the server answers, and creates the indexes. No
// error it returns carries the connection string's secrets (see package connstr).
func Open(ctx context.Context, opts Options) (*Store, error) {
	s, err := open(ctx, opts)
	return s, scrub(err, opts.URI)
}

func open(ctx context.Context, opts Options) (*Store, error) {
	if opts.URI == "" {
		return nil, board.Invalid("mongostore: empty URI")
	}
	if opts.Database == "" {
		return nil, board.Invalid("mongostore: empty database name")
	}
	b := opts.Board
	if len(b.States) == 0 {
		b = board.DefaultBoard(false)
	}
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("mongostore: board: %w", err)
	}
	lease := opts.Lease
	if lease == 0 {
		lease = DefaultLease
	}
	if lease < 0 {
		return nil, board.Invalid("mongostore: negative lease %s", lease)
	}
	horizon := opts.UnleasedHorizon
	if horizon == 0 {
		horizon = DefaultUnleasedHorizon
	}
	if horizon < lease {
		return nil, board.Invalid("mongostore: unleased horizon %s is shorter than one lease (%s)", horizon, lease)
	}
	clock := opts.Clock
	if clock == nil {
		clock = board.SystemClock{}
	}
	eventLag := opts.EventLag
	if eventLag == 0 {
		eventLag = DefaultEventLag
	}
	wc := opts.WriteConcern
	if wc == nil {
		wc = writeconcern.Majority()
	}

	copts := options.Client().ApplyURI(opts.URI).
		SetWriteConcern(wc).
		SetReadPreference(readpref.Primary())
	if opts.Monitor != nil {
		copts.SetMonitor(opts.Monitor)
	}
	client, err := mongo.Connect(copts)
	if err != nil {
		return nil, fmt.Errorf("mongostore: connect: %w", err)
	}
	db := client.Database(opts.Database)
	s := &Store{
		client:   client,
		db:       db,
		cards:    db.Collection(collCards),
		runs:     db.Collection(collRuns),
		events:   db.Collection(collEvents),
		meta:     db.Collection(collMeta),
		reapers:  db.Collection(collReapers),
		clock:    clock,
		horizon:  horizon,
		eventLag: eventLag,
	}
	if err := client.Ping(ctx, readpref.Primary()); err != nil {
		_ = client.Disconnect(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("mongostore: ping: %w", err)
	}
	if err := s.createIndexes(ctx); err != nil {
		_ = client.Disconnect(context.WithoutCancel(ctx))
		return nil, err
	}
	stored, err := s.seedBoard(ctx, b)
	if err != nil {
		_ = client.Disconnect(context.WithoutCancel(ctx))
		return nil, err
	}
	s.cacheBoard(stored)
	cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stop, s.compacted = stop, make(chan struct{})
	go s.compactor(cctx)
	return s, nil
}

// index is one index the queries rely on.
type index struct {
	name   string
	keys   []string
	unique bool
}

func (s *Store) haveIndexes(ctx context.Context, coll *mongo.Collection, want []index) (bool, error) {
	specs, err := coll.Indexes().ListSpecifications(ctx)
	if err != nil {
		return false, err
	}
	have := map[string]bool{}
	for _, sp := range specs {
		have[sp.Name] = true
	}
	for _, ix := range want {
		if !have[ix.name] {
			return false, nil
		}
	}
	return true, nil
}

// createIndexes creates the indexes the queries rely on that are missing
// (DESIGN.md#fleet-indexes); every agent does it at start.
func (s *Store) createIndexes(ctx context.Context) error {
	sets := []struct {
		coll    *mongo.Collection
		indexes []index
	}{
		// The cards indexes are the catalogue's (indexes.go,
		// DESIGN.md#fleet-indexes); the event log's are ev_ts (Events and
		// the compactor read pending outboxes by stamp) and outbox (the
		// compactor finds outboxes an older version left unstamped).
		{s.cards, append(slices.Clone(cardIndexes),
			index{name: "ev_ts", keys: []string{fieldEvTS}},
			index{name: "outbox", keys: []string{fieldOutbox + ".id"}})},
		{s.runs, []index{{name: "outbox", keys: []string{fieldOutbox + ".id"}}}},
		// The outbox entry id: an entry an older version relayed is not published again.
		{s.events, []index{{name: "key", keys: []string{"key"}, unique: true}}},
	}
	for _, set := range sets {
		// Only missing indexes are created. Re-creating an existing one is
		// a no-op on MongoDB, but FerretDB v1 drops the connection on it,
		// and every agent of a fleet opens the same database.
		specs, err := set.coll.Indexes().ListSpecifications(ctx)
		if err != nil {
			return fmt.Errorf("mongostore: list indexes on %s: %w", set.coll.Name(), err)
		}
		have := map[string]bool{}
		for _, sp := range specs {
			have[sp.Name] = true
		}
		var missing []mongo.IndexModel
		for _, ix := range set.indexes {
			if have[ix.name] {
				continue
			}
			keys := bson.D{}
			for _, k := range ix.keys {
				keys = append(keys, bson.E{Key: k, Value: 1})
			}
			o := options.Index().SetName(ix.name)
			if ix.unique {
				o.SetUnique(true)
			}
			missing = append(missing, mongo.IndexModel{Keys: keys, Options: o})
		}
		if len(missing) == 0 {
			continue
		}
		if _, err := set.coll.Indexes().CreateMany(ctx, missing); err != nil {
			// Another agent starting at the same moment may have created
			// them first: what matters is that they exist now.
			if ok, lerr := s.haveIndexes(ctx, set.coll, set.indexes); lerr != nil || !ok {
				return fmt.Errorf("mongostore: create indexes on %s: %w", set.coll.Name(), err)
			}
		}
	}
	return nil
}

// Close stops the compactor, retires the reapers this store recorded
// (DESIGN.md#reaper-shares), and disconnects from the server.
func (s *Store) Close() error {
	s.stop()
	<-s.compacted
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	retired := s.retireReapers(ctx)
	err := s.client.Disconnect(ctx)
	if errors.Is(err, mongo.ErrClientDisconnected) {
		// Closed before: nothing was retired or disconnected now.
		return nil
	}
	return errors.Join(retired, err)
}

// serverClock is the server's wall time for a write (a reading aged to
// now, see readClock) and its uncertainty: the round trip that read it
// plus the drift since.
type serverClock struct {
	now time.Time
	rtt time.Duration
	// fresh: the reading was asked for by this call, not reused. Its hello
	// left after the call began, so after its caller's attempt: the
	// server read its clock no earlier than its time at the attempt.
	fresh bool
	// cluster is the replica set's cluster time, aged like now (zero on a
	// standalone server): the clock the server's write stamps follow.
	cluster time.Time
}

// Server-clock readings are reused instead of asked for before every
// write (DESIGN.md#twin-clock): a heartbeat tick or a reaper pass reads
// the clock once. A reading taken age ago stands for the server's time
// now as reading + age, and its uncertainty grows by age/driftDivisor for
// the rate at which the two clocks may drift apart. The uncertainty is
// counted against every comparison (Now) and in favour of every lease end
// a reused reading stamps (serverClock.leaseUntil), like the round trip.
const (
	// clockReuse is how long a reading serves the stamps of writes:
	// leases, epochs, claimed_at and updated_at.
	clockReuse = time.Second
	// horizonReuse is how long a reading serves the event horizon, which
	// only needs a lower bound of the server's time.
	horizonReuse = time.Minute
	// driftDivisor: the clocks are taken to drift apart by at most
	// 1 part in driftDivisor (1000 ppm, far above a real oscillator's).
	driftDivisor = 1000
)

// clockReading is one hello reply's localTime, the round trip that asked
// for it, and when (local, monotonic) the reply arrived.
type clockReading struct {
	now  time.Time
	rtt  time.Duration
	recv time.Time
	// recvClock is the store's clock (Options.Clock) at recv: a reading is
	// aged by that clock's elapsed time, the system's monotonic clock in
	// production, so a test that simulates time passing moves the aged
	// reading with it, deterministically.
	recvClock time.Time
	// cluster is the replica set's cluster time in the reply (zero on a
	// standalone server): the clock the server's write stamps follow.
	cluster bson.Timestamp
}

// serverNow is the server's clock for a write: a reading at most
// clockReuse old.
func (s *Store) serverNow(ctx context.Context) (serverClock, error) {
	return s.readClock(ctx, clockReuse)
}

// readClock returns the last reading aged to now when it is younger than
// reuse, and asks the server otherwise. DESIGN.md#epoch: on the fleet
// twin the lease is stamped with the server's clock, so an agent whose own
// clock runs fast cannot mint itself extra lease. FerretDB has no $$NOW
// and no pipeline updates, so the time is read from hello.localTime
// instead of being computed inside the update.
//
// The round trip is measured on the monotonic clock (it is a local
// duration, not a wall time) and rounded UP to whole milliseconds, the
// resolution of a BSON date.
func (s *Store) readClock(ctx context.Context, reuse time.Duration) (serverClock, error) {
	s.clkMu.Lock()
	r := s.clk
	s.clkMu.Unlock()
	if age, ok := s.age(r, reuse); ok {
		return r.aged(age), nil
	}
	start := time.Now()
	raw, err := s.db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	recv := time.Now()
	if err != nil {
		return serverClock{}, fmt.Errorf("mongostore: read the server clock: %w", err)
	}
	ms, ok := raw.Lookup("localTime").DateTimeOK()
	if !ok {
		return serverClock{}, fmt.Errorf("mongostore: the server's hello reply carries no localTime")
	}
	rtt := (recv.Sub(start) + time.Millisecond - 1).Truncate(time.Millisecond)
	r = clockReading{now: time.UnixMilli(ms).UTC(), rtt: rtt, recv: recv, recvClock: s.clock.Now()}
	if t, i, ok := raw.Lookup("$clusterTime", "clusterTime").TimestampOK(); ok {
		r.cluster = bson.Timestamp{T: t, I: i}
	}
	s.clkMu.Lock()
	if r.recv.After(s.clk.recv) {
		s.clk = r
	}
	s.clkMu.Unlock()
	c := r.aged(0)
	c.fresh = true
	return c, nil
}

// age is how long ago r arrived; ok is false when there is no reading, it
// is reuse old or older, or the store's clock has moved back since.
func (s *Store) age(r clockReading, reuse time.Duration) (time.Duration, bool) {
	if r.recv.IsZero() {
		return 0, false
	}
	// Aged by the store's clock, and past reuse on either clock, so a test
	// whose clock stands still reads the server's clock as often as
	// production does.
	age := s.clock.Now().Sub(r.recvClock)
	if age < 0 || age >= reuse || time.Since(r.recv) >= reuse {
		return 0, false
	}
	return age, true
}

// aged is the reading as it stands age after it arrived: the server's
// clock has moved on by age, give or take the drift, which is added to
// the uncertainty (rounded up to whole milliseconds).
func (r clockReading) aged(age time.Duration) serverClock {
	drift := (age/driftDivisor + time.Millisecond - 1).Truncate(time.Millisecond)
	c := serverClock{now: r.now.Add(age).Truncate(time.Millisecond), rtt: r.rtt + drift}
	if r.cluster.T != 0 {
		c.cluster = time.Unix(int64(r.cluster.T), 0).Add(age)
	}
	return c
}

// lowerNow is a lower bound of the server's clock from a reading at most
// reuse old (see Now).
func (s *Store) lowerNow(ctx context.Context, reuse time.Duration) (time.Time, error) {
	clk, err := s.readClock(ctx, reuse)
	if err != nil {
		return time.Time{}, err
	}
	return clk.now.Add(-clk.rtt), nil
}

// Now is the server's clock as a lower bound: the time the hello reply
// reported, less the round trip. The server read its clock somewhere inside
// that round trip, so the reading minus the whole round trip is no later
// than the server's time when the caller got it — and every comparison the
// caller makes with it (is a lease expired yet?) errs towards "not yet".
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	return s.lowerNow(ctx, clockReuse)
}

// leaseUntil is the end of a lease granted now, measured from no earlier
// than the server's time at its holder's attempt. The holder trusts its
// claim until its attempt + lease − margin (DESIGN.md#trusted-deadline),
// so such a lease outlasts that deadline by at least the margin, however
// slow the hello was.
//
//   - A fresh reading (asked for by this call) was read by the server
//     after the call, and so the attempt, began: the reported time (and
//     the millisecond it is truncated to) is such a time already. Adding
//     the round trip would only stretch the lease past what its holder was
//     granted, and the boot sweep, which infers the holder's deadline from
//     the stored lease, pays for every millisecond of that out of its
//     second margin (DESIGN.md#boot-sweep).
//   - A reused reading may be older than the attempt: the lease is
//     measured from the UPPER bound of the server's time now, the reading
//     plus its uncertainty (the round trip and the drift), as $$NOW would.
//     Measured from the lower bound, it fell short of the deadline once
//     twice the round trip exceeded the margin, and a reaper could hand
//     the card on while its holder worked.
//
// The lease gains at most the uncertainty; the comparisons with it
// (Store.Now) keep the lower bound.
func (c serverClock) leaseUntil(lease time.Duration) time.Time {
	if c.fresh {
		return c.now.Add(lease + time.Millisecond)
	}
	return c.now.Add(lease + c.rtt)
}

// epochAfter is the fence of a new acquisition: max(stored + 1, server
// time in milliseconds). The floor at the server clock is what keeps the
// epoch monotone when a foreign write drops the field (DESIGN.md#epoch-monotone); the
// local twin's plain counter (stored + 1) is correct only because nobody
// else writes its file (DESIGN.md#twin-epoch). Do not "simplify" one into the other.
func (c serverClock) epochAfter(stored int64) int64 {
	return max(stored+1, c.now.UnixMilli())
}

// Traits: a fleet's shared store, on the server's clock, its events published
// from each document's outbox after the write.
func (s *Store) Traits() board.Traits {
	return board.Traits{Shared: true, ServerClock: true, Outbox: true}
}
