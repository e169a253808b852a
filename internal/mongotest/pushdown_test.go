package mongotest_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/leasekeeper/leasekeeper/internal/mongotest"
)

// TestNarrowedFilterStillMatchesEveryField: the test server narrows a
// filter that names _id to that one document (pushdown.go), and every
// command must still match the rest of the filter on it. Each command is
// asked once with a filter the document fails on a second field (no
// match, no write) and once with one it meets.
func TestNarrowedFilterStillMatchesEveryField(t *testing.T) {
	ctx := context.Background()
	coll := mongotest.Client(t).Database(mongotest.Database(t)).Collection("cards")
	docs := []any{
		bson.D{{Key: "_id", Value: "a"}, {Key: "epoch", Value: int64(2)}, {Key: "state", Value: "ready"}},
		bson.D{{Key: "_id", Value: "b"}, {Key: "epoch", Value: int64(1)}, {Key: "state", Value: "ready"}},
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	miss := bson.D{{Key: "_id", Value: "a"}, {Key: "epoch", Value: int64(1)}}
	hit := bson.D{{Key: "_id", Value: "a"}, {Key: "epoch", Value: int64(2)}, {Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"ready"}}}}}

	count := func(f bson.D) int64 {
		t.Helper()
		n, err := coll.CountDocuments(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(miss); n != 0 {
		t.Errorf("count with a failing second field = %d, want 0", n)
	}
	if n := count(hit); n != 1 {
		t.Errorf("count with every field met = %d, want 1", n)
	}

	find := func(f bson.D) int {
		t.Helper()
		cur, err := coll.Find(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []bson.M
		if err := cur.All(ctx, &out); err != nil {
			t.Fatal(err)
		}
		return len(out)
	}
	if n := find(miss); n != 0 {
		t.Errorf("find with a failing second field returned %d documents, want 0", n)
	}
	if n := find(hit); n != 1 {
		t.Errorf("find with every field met returned %d documents, want 1", n)
	}

	agg := func(f bson.D) int {
		t.Helper()
		cur, err := coll.Aggregate(ctx, mongo.Pipeline{{{Key: "$match", Value: f}}})
		if err != nil {
			t.Fatal(err)
		}
		var out []bson.M
		if err := cur.All(ctx, &out); err != nil {
			t.Fatal(err)
		}
		return len(out)
	}
	if n := agg(miss); n != 0 {
		t.Errorf("aggregate $match with a failing second field returned %d documents, want 0", n)
	}
	if n := agg(hit); n != 1 {
		t.Errorf("aggregate $match with every field met returned %d documents, want 1", n)
	}

	set := func(v string) bson.D { return bson.D{{Key: "$set", Value: bson.D{{Key: "owner", Value: v}}}} }
	err := coll.FindOneAndUpdate(ctx, miss, set("late")).Err()
	if !errors.Is(err, mongo.ErrNoDocuments) {
		t.Errorf("findAndModify with a failing second field: err = %v, want no documents", err)
	}
	res, err := coll.UpdateOne(ctx, miss, set("late"))
	if err != nil {
		t.Fatal(err)
	}
	if res.MatchedCount != 0 || res.ModifiedCount != 0 {
		t.Errorf("update with a failing second field matched %d, modified %d; want 0, 0", res.MatchedCount, res.ModifiedCount)
	}
	del, err := coll.DeleteOne(ctx, miss)
	if err != nil {
		t.Fatal(err)
	}
	if del.DeletedCount != 0 {
		t.Errorf("delete with a failing second field deleted %d, want 0", del.DeletedCount)
	}
	if n := count(bson.D{{Key: "owner", Value: "late"}}); n != 0 {
		t.Errorf("%d documents took a write their filter refused", n)
	}

	if err := coll.FindOneAndUpdate(ctx, hit, set("owner-1")).Err(); err != nil {
		t.Errorf("findAndModify with every field met: %v", err)
	}
	if res, err := coll.UpdateOne(ctx, hit, set("owner-2")); err != nil || res.ModifiedCount != 1 {
		t.Errorf("update with every field met: modified %v, err %v; want 1", res, err)
	}
	if n := count(bson.D{{Key: "_id", Value: "a"}, {Key: "owner", Value: "owner-2"}}); n != 1 {
		t.Errorf("the document holds %d matching writes, want the last one", n)
	}
	if del, err := coll.DeleteOne(ctx, hit); err != nil || del.DeletedCount != 1 {
		t.Errorf("delete with every field met: %v, err %v; want 1 deleted", del, err)
	}
	// The other document was never in reach of a filter naming "a".
	if n := count(bson.D{{Key: "_id", Value: "b"}, {Key: "epoch", Value: int64(1)}}); n != 1 {
		t.Errorf("document b: %d left, want 1", n)
	}
}

// TestStringNarrowingKeepsEveryMatch: the test server keeps only the rows
// whose stored JSON spells the strings a filter's top-level equalities ask
// for (pushdown.go). Every document that matches must still be found, by
// every command, however the string is stored: top level, in a nested
// document, in an array, with characters JSON escapes; and a document that
// spells the string elsewhere (another field, a key) must still be matched
// against the whole filter and left out.
func TestStringNarrowingKeepsEveryMatch(t *testing.T) {
	ctx := context.Background()
	coll := mongotest.Client(t).Database(mongotest.Database(t)).Collection("cards")
	odd := "a<b&\"c\"\\é\u2028"
	docs := []any{
		bson.D{{Key: "_id", Value: "top"}, {Key: "state", Value: "ready"}, {Key: "note", Value: odd}},
		bson.D{{Key: "_id", Value: "nested"}, {Key: "state", Value: "done"}, {Key: "run", Value: bson.D{{Key: "id", Value: "r1"}}}},
		bson.D{{Key: "_id", Value: "array"}, {Key: "state", Value: "ready"}, {Key: "runs", Value: bson.A{"r0", "r1"}}, {Key: "labels", Value: bson.A{odd}}},
		// Spells "ready" and "r1", but never where a filter below asks.
		bson.D{{Key: "_id", Value: "elsewhere"}, {Key: "state", Value: "r1"}, {Key: "note", Value: "ready"}, {Key: "ready", Value: true}},
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	ids := func(f bson.D) []string {
		t.Helper()
		cur, err := coll.Find(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []struct {
			ID string `bson:"_id"`
		}
		if err := cur.All(ctx, &out); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range out {
			got = append(got, d.ID)
		}
		slices.Sort(got)
		return got
	}
	cases := []struct {
		filter bson.D
		want   []string
	}{
		{bson.D{{Key: "state", Value: "ready"}}, []string{"array", "top"}},
		{bson.D{{Key: "run.id", Value: "r1"}}, []string{"nested"}},
		{bson.D{{Key: "runs", Value: "r1"}}, []string{"array"}},
		{bson.D{{Key: "note", Value: odd}}, []string{"top"}},
		{bson.D{{Key: "labels", Value: odd}}, []string{"array"}},
		{bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{"done", "ready"}}}}}, []string{"array", "nested", "top"}},
		{bson.D{{Key: "state", Value: "ready"}, {Key: "runs", Value: "r0"}}, []string{"array"}},
		{bson.D{{Key: "state", Value: "ready"}, {Key: "note", Value: "ready"}}, nil},
		{bson.D{{Key: "state", Value: "nowhere"}}, nil},
	}
	for _, c := range cases {
		if got := ids(c.filter); !slices.Equal(got, c.want) {
			t.Errorf("find %v = %v, want %v", c.filter, got, c.want)
		}
		n, err := coll.CountDocuments(ctx, c.filter)
		if err != nil {
			t.Fatal(err)
		}
		if int(n) != len(c.want) {
			t.Errorf("count %v = %d, want %d", c.filter, n, len(c.want))
		}
		cur, err := coll.Aggregate(ctx, mongo.Pipeline{{{Key: "$match", Value: c.filter}}})
		if err != nil {
			t.Fatal(err)
		}
		var agg []bson.M
		if err := cur.All(ctx, &agg); err != nil {
			t.Fatal(err)
		}
		if len(agg) != len(c.want) {
			t.Errorf("aggregate $match %v = %d documents, want %d", c.filter, len(agg), len(c.want))
		}
	}

	// The writes: each finds its document by a string it spells in a
	// nested document, an array or with escapes, and only that one.
	set := func(v string) bson.D { return bson.D{{Key: "$set", Value: bson.D{{Key: "owner", Value: v}}}} }
	if err := coll.FindOneAndUpdate(ctx, bson.D{{Key: "run.id", Value: "r1"}}, set("fam")).Err(); err != nil {
		t.Errorf("findAndModify by run.id: %v", err)
	}
	if res, err := coll.UpdateMany(ctx, bson.D{{Key: "labels", Value: odd}}, set("upd")); err != nil || res.MatchedCount != 1 {
		t.Errorf("update by an escaped label: %+v, %v; want 1 matched", res, err)
	}
	if got, want := ids(bson.D{{Key: "owner", Value: "fam"}}), []string{"nested"}; !slices.Equal(got, want) {
		t.Errorf("findAndModify wrote %v, want %v", got, want)
	}
	if got, want := ids(bson.D{{Key: "owner", Value: "upd"}}), []string{"array"}; !slices.Equal(got, want) {
		t.Errorf("update wrote %v, want %v", got, want)
	}
	if del, err := coll.DeleteMany(ctx, bson.D{{Key: "note", Value: "ready"}}); err != nil || del.DeletedCount != 1 {
		t.Errorf("delete by note: %+v, %v; want 1 deleted", del, err)
	}
	if got, want := ids(bson.D{}), []string{"array", "nested", "top"}; !slices.Equal(got, want) {
		t.Errorf("after the delete: %v, want %v", got, want)
	}
}
