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
	collCards    = "cards"
	collRuns     = "runs"
	collEvents   = "events"
	collCounters = "counters"

	// DefaultUnleasedHorizon is how long a claim with no lease must have
	// gone without an update before the candidate listing offers it
	// (DESIGN.md#unleased-arm: a missing lease is an absence, not evidence that a
	// heartbeat stopped, so it gets a much longer horizon than a lease).
	DefaultUnleasedHorizon = 24 * time.Hour
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
	// Clock is accepted for symmetry with the local twin and deliberately
	// NOT used for anything stored: every time this twin writes comes from
	// the server (DESIGN.md#store-clock). nil means board.SystemClock{}.
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
	counters *mongo.Collection
	meta     *mongo.Collection
	clock    board.Clock
	horizon  time.Duration

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
		counters: db.Collection(collCounters),
		meta:     db.Collection(collMeta),
		clock:    clock,
		horizon:  horizon,
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
		// DESIGN.md#fleet-indexes), and the outbox index the relay sweep
		// finds pending events by.
		{s.cards, append(slices.Clone(cardIndexes), index{name: "outbox", keys: []string{fieldOutbox + ".id"}})},
		{s.runs, []index{{name: "outbox", keys: []string{fieldOutbox + ".id"}}}},
		// The outbox entry id: relaying an entry twice stores it once.
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

// Close disconnects from the server.
func (s *Store) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.client.Disconnect(ctx)
	if errors.Is(err, mongo.ErrClientDisconnected) {
		return nil
	}
	return err
}

// serverClock is the server's wall time, read from the hello reply just
// before a write, and the round trip it took.
type serverClock struct {
	now time.Time
	rtt time.Duration
}

// serverNow asks the server for its clock. DESIGN.md#epoch: on the fleet twin
// the lease is stamped with the server's clock, so an agent whose own clock
// runs fast cannot mint itself extra lease. FerretDB has no $$NOW and no
// pipeline updates, so the time is read from hello.localTime instead of
// being computed inside the update.
//
// The round trip is measured on the monotonic clock (it is a local
// duration, not a wall time) and rounded UP to whole milliseconds, the
// resolution of a BSON date.
func (s *Store) serverNow(ctx context.Context) (serverClock, error) {
	start := time.Now()
	raw, err := s.db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	rtt := time.Since(start)
	if err != nil {
		return serverClock{}, fmt.Errorf("mongostore: read the server clock: %w", err)
	}
	ms, ok := raw.Lookup("localTime").DateTimeOK()
	if !ok {
		return serverClock{}, fmt.Errorf("mongostore: the server's hello reply carries no localTime")
	}
	rtt = (rtt + time.Millisecond - 1).Truncate(time.Millisecond)
	return serverClock{now: time.UnixMilli(ms).UTC(), rtt: rtt}, nil
}

// Now is the server's clock as a lower bound: the time the hello reply
// reported, less the round trip. The server read its clock somewhere inside
// that round trip, so the reading minus the whole round trip is no later
// than the server's time when the caller got it — and every comparison the
// caller makes with it (is a lease expired yet?) errs towards "not yet".
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	clk, err := s.serverNow(ctx)
	if err != nil {
		return time.Time{}, err
	}
	return clk.now.Add(-clk.rtt), nil
}

// leaseUntil is the end of a lease granted now. The round trip of the
// clock reading is counted AGAINST the lease, never in its favour: the
// server's time when the hello was sent may be up to one round trip before
// the time it reported, and the holder measures its own lease from before
// it asked, so the granted lease is shortened by the whole round trip.
func (c serverClock) leaseUntil(lease time.Duration) time.Time {
	return c.now.Add(lease - c.rtt)
}

// epochAfter is the fence of a new acquisition: max(stored + 1, server
// time in milliseconds). The floor at the server clock is what keeps the
// epoch monotone when a foreign write drops the field (DESIGN.md#epoch-monotone); the
// local twin's plain counter (stored + 1) is correct only because nobody
// else writes its file (DESIGN.md#twin-epoch). Do not "simplify" one into the other.
func (c serverClock) epochAfter(stored int64) int64 {
	return max(stored+1, c.now.UnixMilli())
}

// Traits: a fleet's shared store, on the server's clock, its events relayed
// from each document's outbox after the write.
func (s *Store) Traits() board.Traits {
	return board.Traits{Shared: true, ServerClock: true, Outbox: true}
}
