package mongotest_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

func helloTime(t *testing.T, db *mongo.Database, cmd string) time.Time {
	t.Helper()
	raw, err := db.RunCommand(context.Background(), bson.D{{Key: cmd, Value: 1}}).Raw()
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	ms, ok := raw.Lookup("localTime").DateTimeOK()
	if !ok {
		t.Fatalf("the %s reply has no localTime: %s", cmd, raw)
	}
	return time.UnixMilli(ms).UTC()
}

func proxyClient(t *testing.T, uri string, opts ...*options.ClientOptions) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(append([]*options.ClientOptions{options.Client().ApplyURI(uri)}, opts...)...)
	if err != nil {
		t.Fatalf("connect to the clock proxy: %v", err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c
}

// TestClockProxyReportsTheTestClock: every hello the client sends through
// the proxy — under either spelling — reports the test's clock, and the
// reading follows the clock both ways (ahead of and behind real time).
func TestClockProxyReportsTheTestClock(t *testing.T) {
	at := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	clock := boardtest.NewManualClock(at)
	db := proxyClient(t, mongotest.ClockProxy(t, clock)).Database(mongotest.Database(t))

	if got := helloTime(t, db, "hello"); !got.Equal(at) {
		t.Errorf("hello localTime = %s, want %s", got, at)
	}
	clock.Advance(90 * time.Minute)
	if got, want := helloTime(t, db, "isMaster"), at.Add(90*time.Minute); !got.Equal(want) {
		t.Errorf("isMaster localTime after advancing = %s, want %s", got, want)
	}
	past := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	clock.Set(past)
	if got := helloTime(t, db, "hello"); !got.Equal(past) {
		t.Errorf("hello localTime after stepping back = %s, want %s", got, past)
	}
	// The same server without the proxy still tells its own time.
	direct := helloTime(t, mongotest.Client(t).Database("admin"), "hello")
	if d := time.Since(direct); d < -time.Hour || d > time.Hour {
		t.Errorf("the server's own clock reads %s, want about now: the proxy must not change the server", direct)
	}
}

// TestClockProxyForwardsEverythingElse: ordinary commands, their replies
// and an unacknowledged write (a request flagged moreToCome, which gets no
// answer) pass unchanged and leave the connection in step, so the hello
// after them is still recognised and rewritten.
func TestClockProxyForwardsEverythingElse(t *testing.T) {
	at := time.Date(2032, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := boardtest.NewManualClock(at)
	uri := mongotest.ClockProxy(t, clock)
	// One connection, so the unacknowledged write and the reads after it
	// share it.
	client := proxyClient(t, uri, options.Client().SetMaxPoolSize(1))
	name := mongotest.Database(t)
	db := client.Database(name)
	ctx := context.Background()
	coll := db.Collection("things")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 1}}); err != nil {
		t.Fatalf("insert: %v", err)
	}
	unack := db.Collection("things", options.Collection().SetWriteConcern(writeconcern.Unacknowledged()))
	for i := range 5 {
		if _, err := unack.InsertOne(ctx, bson.D{{Key: "n", Value: 10 + i}}); err != nil {
			t.Fatalf("unacknowledged insert %d: %v", i, err)
		}
	}
	if got := helloTime(t, db, "hello"); !got.Equal(at) {
		t.Errorf("hello localTime after unacknowledged writes = %s, want %s", got, at)
	}
	var doc struct {
		N int `bson:"n"`
	}
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&doc); err != nil || doc.N != 1 {
		t.Fatalf("find through the proxy = %+v, %v; want n 1", doc, err)
	}
	raw, err := db.RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Raw()
	if err != nil {
		t.Fatalf("ping: %v", err)
	}
	if _, err := raw.LookupErr("localTime"); err == nil {
		t.Errorf("the ping reply gained a localTime: only hello replies are rewritten (%s)", raw)
	}
	// The unacknowledged writes landed (the server answered them to no
	// one; the next acknowledged command on the same connection waits
	// behind them).
	n, err := coll.CountDocuments(ctx, bson.D{})
	if err != nil || n != 6 {
		t.Errorf("documents = %d, %v; want 6", n, err)
	}
}

// TestClockProxyDrivesTheStoreClock: the MongoDB twin stamps what it writes
// with the proxy's clock — the claim's claimed_at and lease, and the epoch
// floor — so a test controls the fleet's server time without sleeping. The
// store is given the same clock: it ages its reading of the server's clock
// by the time that passes (DESIGN.md#twin-clock), here the simulated time.
func TestClockProxyDrivesTheStoreClock(t *testing.T) {
	at := time.Date(2033, 6, 7, 8, 9, 10, 0, time.UTC)
	clock := boardtest.NewManualClock(at)
	ctx := context.Background()
	s, err := mongostore.Open(ctx, mongostore.Options{URI: mongotest.ClockProxy(t, clock), Database: mongotest.Database(t), Clock: clock})
	if err != nil {
		t.Fatalf("mongostore.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "c1", Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	const lease = 30 * time.Second
	card, err := s.Claim(ctx, board.ClaimParams{Card: "c1", Marker: "hosta-100", Lease: lease})
	tok := card.Token()
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.GetCard(ctx, board.GetCardParams{ID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.ClaimedAt.Equal(at) {
		t.Errorf("claimed_at = %s, want the proxy clock %s", c.ClaimedAt, at)
	}
	// The lease is measured from no earlier than the server's time at the
	// claim: the round trip may lengthen it, never shorten it
	// (DESIGN.md#twin-clock).
	if c.ClaimLeaseUntil.Before(at.Add(lease)) || c.ClaimLeaseUntil.After(at.Add(lease+time.Second)) {
		t.Errorf("lease until = %s, want just over %s", c.ClaimLeaseUntil, at.Add(lease))
	}
	if tok.Epoch != at.UnixMilli() {
		t.Errorf("epoch = %d, want the server-clock floor %d", tok.Epoch, at.UnixMilli())
	}
	clock.Advance(time.Hour)
	res, err := s.RenewClaims(ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: "c1", Token: tok}}, Lease: lease})
	if err != nil || res[0].Err != nil {
		t.Fatalf("RenewClaims: %+v, %v", res, err)
	}
	if want := at.Add(time.Hour + lease); res[0].LeaseUntil.Before(want) || res[0].LeaseUntil.After(want.Add(time.Second)) {
		t.Errorf("renewed lease until = %s, want just over %s", res[0].LeaseUntil, want)
	}
}
