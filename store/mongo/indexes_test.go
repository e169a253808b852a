package mongostore_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

// sentQuery is one query statement the store sent, as the tests of
// DESIGN.md#fleet-indexes see it.
type sentQuery struct {
	cmd, coll   string
	shape, sort string
	// explain is the statement alone, as an explainable command.
	explain bson.D
}

// queryRecorder records every query statement a store sends.
type queryRecorder struct {
	mu   sync.Mutex
	sent []sentQuery
}

// driverFields are the fields the driver adds to a command that an
// explain of it must not carry.
var driverFields = []string{"$db", "lsid", "$clusterTime", "txnNumber", "writeConcern", "readConcern",
	"$readPreference", "apiVersion", "apiStrict", "apiDeprecationErrors", "autocommit", "startTransaction"}

func (r *queryRecorder) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, ev *event.CommandStartedEvent) {
		var qs []sentQuery
		coll, _ := ev.Command.Lookup(ev.CommandName).StringValueOK()
		base := bson.D{}
		elems, _ := ev.Command.Elements()
		for _, e := range elems {
			if !slices.Contains(driverFields, e.Key()) {
				base = append(base, bson.E{Key: e.Key(), Value: e.Value()})
			}
		}
		sortOf := func(v bson.RawValue) string {
			d, ok := v.DocumentOK()
			if !ok {
				return ""
			}
			return renderSortRaw(d)
		}
		switch ev.CommandName {
		case "find":
			f, _ := ev.Command.Lookup("filter").DocumentOK()
			qs = append(qs, sentQuery{cmd: "find", coll: coll, shape: filterShape(f), sort: sortOf(ev.Command.Lookup("sort")), explain: base})
		case "findAndModify":
			f, _ := ev.Command.Lookup("query").DocumentOK()
			qs = append(qs, sentQuery{cmd: "findAndModify", coll: coll, shape: filterShape(f), sort: sortOf(ev.Command.Lookup("sort")), explain: base})
		case "update", "delete":
			arrKey := map[string]string{"update": "updates", "delete": "deletes"}[ev.CommandName]
			arr, _ := ev.Command.Lookup(arrKey).ArrayOK()
			vals, _ := arr.Values()
			for _, v := range vals {
				stmt, _ := v.DocumentOK()
				f, _ := stmt.Lookup("q").DocumentOK()
				one := bson.D{}
				for _, e := range base {
					if e.Key == arrKey {
						e = bson.E{Key: arrKey, Value: bson.A{stmt}}
					}
					one = append(one, e)
				}
				qs = append(qs, sentQuery{cmd: ev.CommandName, coll: coll, shape: filterShape(f), explain: one})
			}
		case "count", "distinct", "aggregate":
			// None is sent today; one that appears must be listed.
			qs = append(qs, sentQuery{cmd: ev.CommandName, coll: coll, shape: "?", explain: base})
		default:
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.sent = append(r.sent, qs...)
	}}
}

func (r *queryRecorder) queries() []sentQuery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sent)
}

// filterShape is a filter's shape as fleetQuery.Shapes writes it.
func filterShape(f bson.Raw) string {
	elems, _ := f.Elements()
	var parts []string
	for _, e := range elems {
		k, v := e.Key(), e.Value()
		if strings.HasPrefix(k, "$") {
			parts = append(parts, k)
			continue
		}
		if d, ok := v.DocumentOK(); ok {
			ops, _ := d.Elements()
			if len(ops) > 0 && strings.HasPrefix(ops[0].Key(), "$") {
				var names []string
				for _, op := range ops {
					names = append(names, op.Key())
				}
				parts = append(parts, k+" "+strings.Join(names, ","))
				continue
			}
		}
		if v.Type == bson.TypeNull {
			parts = append(parts, k+" = null")
		} else {
			parts = append(parts, k+" =")
		}
	}
	return strings.Join(parts, ", ")
}

func renderSort(d bson.D) string {
	var parts []string
	for _, e := range d {
		parts = append(parts, fmt.Sprintf("%s %v", e.Key, e.Value))
	}
	return strings.Join(parts, ", ")
}

func renderSortRaw(d bson.Raw) string {
	elems, _ := d.Elements()
	var parts []string
	for _, e := range elems {
		n, _ := e.Value().AsInt64OK()
		parts = append(parts, fmt.Sprintf("%s %d", e.Key(), n))
	}
	return strings.Join(parts, ", ")
}

// eventLog reports a query of the event log (the events collection, the
// pending outboxes by their stamp, the unstamped ones an older version
// left): not the catalogue's (DESIGN.md#event-log lists them).
func (q sentQuery) eventLog() bool {
	return q.coll == "events" || strings.HasPrefix(q.shape, "outbox") || strings.HasPrefix(q.shape, "ev_ts") || strings.Contains(q.shape, "_leasekeeper_never_set")
}

// shapeMatches: a shape ending in " …" matches any further conditions.
func shapeMatches(pattern, shape string) bool {
	if prefix, ok := strings.CutSuffix(pattern, " …"); ok {
		return shape == prefix || strings.HasPrefix(shape, prefix+", ")
	}
	return shape == pattern
}

// entryOf is the catalogue entry a query statement falls under, -1 if none.
func entryOf(q sentQuery) int {
	for i, e := range mongostore.FleetQueries {
		if e.Coll != q.coll || e.Cmd != q.cmd || renderSort(e.Sort) != q.sort {
			continue
		}
		if slices.ContainsFunc(e.Shapes, func(p string) bool { return shapeMatches(p, q.shape) }) {
			return i
		}
	}
	return -1
}

// exerciseFleetQueries makes the store send every query of the catalogue
// at least once. background free cards filed to done come first, so a
// planner sees a collection where most cards are neither claimed nor in
// the pool, as a fleet's is.
func exerciseFleetQueries(t *testing.T, f *fleet, background int) {
	t.Helper()
	ctx := f.ctx
	for i := range background {
		f.create(fmt.Sprintf("done%03d", i), board.StateDone)
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// Blockers and dependents: a promotion's listing, a Reopen's holds.
	f.create("b1", board.StateReady)
	f.create("b2", board.StateReady)
	_, err := f.s.CreateCard(ctx, board.CreateCardParams{ID: "dep", DependsOn: []string{"b1", "b2"}, Actor: "cli"})
	must("CreateCard dep", err)
	must("SetState b1 done", f.s.SetState(ctx, board.MoveParams{Card: "b1", To: board.StateDone, Actor: "cli"}))
	must("Reopen b1", f.s.Reopen(ctx, board.MoveParams{Card: "b1", To: board.StateReady, Actor: "cli"}))
	_, err = f.s.Dependents(ctx, board.DependentsParams{ID: "b1"})
	must("Dependents", err)

	// The queue: ClaimNext, Start next, runs displaced and archived.
	for i := range 3 {
		f.create(fmt.Sprintf("q%d", i), board.StateReady)
	}
	c, err := f.s.ClaimNext(ctx, board.ClaimNextParams{Marker: workerA, Lease: testTerm})
	tok := c.Token()
	must("ClaimNext", err)
	_, err = f.s.Start(ctx, board.StartParams{Next: true, Marker: workerB, Lease: testTerm,
		Run: board.Run{ID: "run-next", Host: "host-b", PID: 4343}})
	must("Start next", err)
	for _, id := range []string{"r1", "r2"} {
		_, err = f.s.CreateRun(ctx, board.CreateRunParams{Token: tok, Run: board.Run{ID: id, Card: c.ID, Status: board.RunRunning}})
		must("CreateRun "+id, err)
	}
	_, err = f.s.GetRun(ctx, board.GetRunParams{ID: "r1"})
	must("GetRun", err)

	// The queue routed by labels (DESIGN.md#label-routing): one label, and
	// two.
	for _, nc := range []board.CreateCardParams{
		{ID: "gpu1", State: board.StateReady, Labels: []string{"gpu"}, Actor: "cli"},
		{ID: "gpu2", State: board.StateReady, Labels: []string{"gpu", "big"}, Actor: "cli"},
	} {
		_, err := f.s.CreateCard(ctx, nc)
		must("CreateCard "+nc.ID, err)
	}
	_, err = f.s.ClaimNext(ctx, board.ClaimNextParams{Marker: workerA, Lease: testTerm, Labels: []string{"gpu"}})
	must("ClaimNext routed", err)
	_, err = f.s.Start(ctx, board.StartParams{Next: true, Labels: []string{"gpu", "big"}, Marker: workerB, Lease: testTerm,
		Run: board.Run{ID: "run-routed", Host: "host-b", PID: 4343}})
	must("Start next routed", err)
	_, err = f.s.RenewClaims(ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: c.ID, Token: tok}}, Lease: testTerm})
	must("RenewClaims", err)

	// The listings of ListCards.
	for _, lf := range []board.ListCardsParams{
		{}, {State: board.StateReady}, {ClaimedOnly: true}, {RecoveryOnly: true}, {ClaimHosts: []string{"host-a"}},
		{State: board.StateReady, ClaimedOnly: true}, {State: board.StateReady, RecoveryOnly: true},
		{State: board.StateReady, ClaimHosts: []string{"host-a"}},
	} {
		_, err := f.s.ListCards(ctx, lf)
		must(fmt.Sprintf("ListCards(%+v)", lf), err)
	}
	_, err = f.s.CountCards(ctx)
	must("CountCards", err)

	// Expired candidates on both arms, paged, and the un-leased sweep's
	// listing.
	old := f.serverNow().Add(-72 * time.Hour)
	for i := range 3 {
		id := fmt.Sprintf("leased%d", i)
		f.create(id, board.StateInProgress)
		tok := f.claim(id, workerB)
		must("DisownClaimOwned", f.s.DisownClaimOwned(ctx, board.OwnedParams{Card: id, Token: tok}))
		must("ExpireClaimOwned", f.s.ExpireClaimOwned(ctx, board.OwnedParams{Card: id, Token: tok}))
		id = fmt.Sprintf("unleased%d", i)
		f.create(id, board.StateInProgress)
		must("SetLastRunOwned", f.s.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: id, Token: f.claim(id, workerA), RunID: "run-" + id}))
		f.strip(id, old.Add(time.Duration(i)*time.Minute))
	}
	q := board.ListExpiredClaimCandidatesParams{Cutoff: f.serverNow(), Limit: 2}
	page, err := f.s.ListExpiredClaimCandidates(ctx, q)
	must("ListExpiredClaimCandidates", err)
	if page.Next == "" {
		t.Fatal("the first page of candidates has no next position: the paged shapes are not sent")
	}
	q.After = page.Next
	_, err = f.s.ListExpiredClaimCandidates(ctx, q)
	must("ListExpiredClaimCandidates (page 2)", err)
	_, err = f.s.ListUnleasedRunningClaims(ctx, board.ListUnleasedRunningClaimsParams{Cutoff: f.serverNow().Add(-time.Hour), Limit: 10})
	must("ListUnleasedRunningClaims", err)

	// The reapers' shares (DESIGN.md#reaper-shares): a reaper alone, then
	// a second one splitting the listing, paged; a reaper gone for hours
	// deleted; the store's own retired when it closes (at the end).
	_, err = f.raw.Collection("reapers").InsertOne(ctx, bson.D{{Key: "_id", Value: "host-z-9"}, {Key: "until", Value: old}})
	must("insert a long-gone reaper", err)
	for _, r := range []string{"host-a-1", "host-b-2"} {
		sq := board.ListExpiredClaimCandidatesParams{Cutoff: f.serverNow(), Limit: 1, Share: &board.ReaperShare{Reaper: r, Interval: time.Minute}}
		page, err := f.s.ListExpiredClaimCandidates(ctx, sq)
		must("ListExpiredClaimCandidates (share of "+r+")", err)
		if page.Next == "" {
			t.Fatalf("%s's first page has no next position: the paged shapes of a share are not sent", r)
		}
		sq.After = page.Next
		_, err = f.s.ListExpiredClaimCandidates(ctx, sq)
		must("ListExpiredClaimCandidates (share of "+r+", page 2)", err)
	}

	// Retention (DESIGN.md#retention): finished cards with an archived
	// and an embedded run, a prune (dry, then real), a card delete (dry,
	// then real).
	for _, id := range []string{"fin1", "fin2"} {
		f.create(id, board.StateReady)
		tok := f.claim(id, workerA)
		for _, r := range []string{id + "-a", id + "-b"} {
			_, err := f.s.CreateRun(ctx, board.CreateRunParams{Token: tok, Run: board.Run{ID: r, Card: id, Status: board.RunFinished}})
			must("CreateRun "+r, err)
		}
		must("ReleaseOwned "+id, f.s.ReleaseOwned(ctx, board.OwnedParams{Card: id, Token: tok}))
		must("SetState "+id+" done", f.s.SetState(ctx, board.MoveParams{Card: id, To: board.StateDone, Actor: "cli"}))
	}
	_, err = f.s.DeleteCard(ctx, board.DeleteCardParams{ID: "fin2", Actor: "cli", DryRun: true})
	must("DeleteCard (dry run)", err)
	_, err = f.s.DeleteCard(ctx, board.DeleteCardParams{ID: "fin2", Actor: "cli"})
	must("DeleteCard", err)
	later := f.serverNow().Add(time.Hour)
	_, err = f.s.Prune(ctx, board.PruneParams{Before: later, DryRun: true})
	must("Prune (dry run)", err)
	_, err = f.s.Prune(ctx, board.PruneParams{Before: later})
	must("Prune", err)

	// The board definition.
	b, err := f.s.LoadBoard(ctx)
	must("LoadBoard", err)
	_, err = f.s.SetBoard(ctx, board.SetBoardParams{Expect: b, Next: b})
	must("SetBoard", err)

	must("Close", f.s.Close())
}

// TestEveryFleetQueryIsInTheIndexCatalogue: DESIGN.md#fleet-indexes. Every
// query statement the store sends (outside the event log) falls under an
// entry of the catalogue, with its exact sort; every entry is sent by
// some verb; every index an entry names exists on the server with the
// keys the catalogue gives it. A query added, or a sort changed, without
// its entry fails here, on FerretDB as on MongoDB.
func TestEveryFleetQueryIsInTheIndexCatalogue(t *testing.T) {
	t.Parallel()
	rec := &queryRecorder{}
	f := openFleet(t, mongostore.Options{Monitor: rec.monitor()})
	exerciseFleetQueries(t, f, 0)

	seen := make([]bool, len(mongostore.FleetQueries))
	unlisted := map[string]bool{}
	for _, q := range rec.queries() {
		if q.eventLog() {
			continue
		}
		i := entryOf(q)
		if i < 0 {
			key := fmt.Sprintf("%s on %s: filter {%s} sort {%s}", q.cmd, q.coll, q.shape, q.sort)
			if !unlisted[key] {
				unlisted[key] = true
				t.Errorf("the store sent a query the index catalogue does not list: %s", key)
			}
			continue
		}
		seen[i] = true
	}
	for i, e := range mongostore.FleetQueries {
		if !seen[i] {
			t.Errorf("catalogue entry %q (%s on %s, %q) was never sent: stale, or not exercised", e.Verbs, e.Cmd, e.Coll, e.Shapes)
		}
	}

	// Every index the catalogue names exists, with the catalogue's keys.
	want := mongostore.CardIndexes()
	for _, e := range mongostore.FleetQueries {
		for _, name := range append([]string{e.Index}, e.Alt...) {
			if _, ok := want[name]; !ok {
				t.Errorf("entry %q names index %q, which the store does not create", e.Verbs, name)
			}
		}
	}
	specs, err := f.cards.Indexes().ListSpecifications(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string][]string{}
	for _, sp := range specs {
		var keys []string
		elems, _ := sp.KeysDocument.Elements()
		for _, k := range elems {
			keys = append(keys, k.Key())
		}
		have[sp.Name] = keys
	}
	for name, keys := range want {
		if !slices.Equal(have[name], keys) {
			t.Errorf("cards index %q has keys %q, want %q", name, have[name], keys)
		}
	}
}

// TestFleetIndexesServeTheirSorts: DESIGN.md#fleet-indexes, by the rules
// a MongoDB planner follows. An index serves a sorted query without an
// in-memory sort when its leading fields are points of the filter
// (equality, or $in of values) and the next fields are the sort's keys, in
// the sort's order, _id tiebreak included; it selects when its first field
// is constrained by the filter. Every catalogue entry's index must do both
// for every shape of the entry — or select, and say that it sorts the
// selected range in memory (MemSort).
func TestFleetIndexesServeTheirSorts(t *testing.T) {
	t.Parallel()
	indexes := mongostore.CardIndexes()
	for _, e := range mongostore.FleetQueries {
		keys, ok := indexes[e.Index]
		if !ok {
			t.Errorf("%s: index %q is not created", e.Verbs, e.Index)
			continue
		}
		var sortKeys []string
		for _, s := range e.Sort {
			sortKeys = append(sortKeys, s.Key)
		}
		for _, shape := range e.Shapes {
			points, constrained := map[string]bool{}, map[string]bool{}
			for _, part := range strings.Split(strings.TrimSuffix(shape, " …"), ", ") {
				field, op, _ := strings.Cut(part, " ")
				if field == "" || strings.HasPrefix(field, "$") {
					continue
				}
				constrained[field] = true
				// $all on a multikey field is bounded by one of its
				// values, a point, and the others are checked on the keys.
				points[field] = op == "=" || op == "= null" || op == "$in" || op == "$eq" || op == "$all"
			}
			if shape != "" && !constrained[keys[0]] {
				t.Errorf("%s {%s}: index %q leads with %q, which the filter does not constrain: it selects nothing", e.Verbs, shape, e.Index, keys[0])
			}
			if len(sortKeys) == 0 || e.MemSort {
				continue
			}
			n := 0
			for n < len(keys) && points[keys[n]] {
				n++
			}
			// The order comes from the keys after the point prefix (one
			// ordered scan per point, merged); a sort key the filter pins
			// to points is already ordered within each scan.
			var need []string
			for _, k := range sortKeys {
				if !points[k] {
					need = append(need, k)
				}
			}
			rest := keys[n:]
			ok := len(rest) >= len(need) && slices.Equal(rest[:len(need)], need)
			if !ok {
				t.Errorf("%s {%s} sort {%s}: index %q %q cannot give the order: after its equality fields %q it must continue with the sort keys %q",
					e.Verbs, shape, renderSort(e.Sort), e.Index, keys, keys[:n], sortKeys)
			}
		}
	}
}

// TestFleetQueryPlansUseTheirIndexes: DESIGN.md#fleet-indexes, on a real
// MongoDB. Every query statement the store sends (outside the event log) is
// explained as sent; the winning plan must scan the index its catalogue
// entry names (or one of its alternatives), never the collection, and sort
// nothing in memory unless the entry says its range is sorted in memory.
//
// FerretDB v1 (the default test server, SQLite backend) cannot answer
// this: its explain is SQLite's plan of a SELECT over the collection's
// table, the same "SCAN" for every filter, naming no index. So this runs
// only where LEASEKEEPER_TEST_MONGO_URI names a MongoDB.
func TestFleetQueryPlansUseTheirIndexes(t *testing.T) {
	t.Parallel()
	if os.Getenv(mongotest.EnvURI) == "" {
		t.Skip("query plans are a real MongoDB's (FerretDB's explain names no index); set " + mongotest.EnvURI + " to run this")
	}
	rec := &queryRecorder{}
	f := openFleet(t, mongostore.Options{Monitor: rec.monitor()})
	exerciseFleetQueries(t, f, 200)

	explained := map[string]bool{}
	for _, q := range rec.queries() {
		if q.eventLog() {
			continue
		}
		i := entryOf(q)
		if i < 0 {
			continue // TestEveryFleetQueryIsInTheIndexCatalogue reports it
		}
		e := mongostore.FleetQueries[i]
		key := fmt.Sprintf("%s on %s: filter {%s} sort {%s}", q.cmd, q.coll, q.shape, q.sort)
		if explained[key] {
			continue
		}
		explained[key] = true
		raw, err := f.raw.RunCommand(f.ctx, bson.D{{Key: "explain", Value: q.explain}, {Key: "verbosity", Value: "queryPlanner"}}).Raw()
		if err != nil {
			t.Errorf("explain %s: %v", key, err)
			continue
		}
		winning, ok := raw.Lookup("queryPlanner", "winningPlan").DocumentOK()
		if !ok {
			t.Errorf("explain %s: no queryPlanner.winningPlan in %s", key, raw)
			continue
		}
		stages, indexes := planStages(winning)
		switch {
		case stages["COLLSCAN"]:
			t.Errorf("%s (%s): the plan scans the collection: %s", key, e.Verbs, winning)
		case stages["SORT"] && !e.MemSort:
			t.Errorf("%s (%s): the plan sorts in memory: %s", key, e.Verbs, winning)
		case len(indexes) == 0:
			t.Errorf("%s (%s): the plan scans no index: %s", key, e.Verbs, winning)
		}
		for _, ix := range indexes {
			if ix != e.Index && !slices.Contains(e.Alt, ix) {
				t.Errorf("%s (%s): the plan scans index %q, want %q (or %q)", key, e.Verbs, ix, e.Index, e.Alt)
			}
		}
	}
}

// planStages walks a plan: its stage names, and the indexes it scans.
func planStages(plan bson.Raw) (map[string]bool, []string) {
	stages := map[string]bool{}
	var indexes []string
	var walk func(d bson.Raw)
	walk = func(d bson.Raw) {
		stage, _ := d.Lookup("stage").StringValueOK()
		if stage != "" {
			stages[stage] = true
			name, ok := d.Lookup("indexName").StringValueOK()
			switch {
			case ok:
				indexes = append(indexes, name)
			case stage == "IDHACK" || strings.HasPrefix(stage, "EXPRESS_"):
				indexes = append(indexes, "_id_")
			}
		}
		elems, _ := d.Elements()
		for _, e := range elems {
			switch v := e.Value(); v.Type {
			case bson.TypeEmbeddedDocument:
				walk(v.Document())
			case bson.TypeArray:
				vals, _ := v.Array().Values()
				for _, x := range vals {
					if sub, ok := x.DocumentOK(); ok {
						walk(sub)
					}
				}
			}
		}
	}
	walk(plan)
	return stages, indexes
}

// TestFleetIndexTableIsTheCatalogue: the table under DESIGN.md#fleet-indexes
// is the catalogue the tests above check, rendered; a change to either
// without the other fails here.
func TestFleetIndexTableIsTheCatalogue(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	want := renderFleetIndexTable()
	if !strings.Contains(string(doc), want) {
		t.Errorf("docs/DESIGN.md#fleet-indexes does not hold the catalogue's table; it should read:\n\n%s", want)
	}
}

func renderFleetIndexTable() string {
	var b strings.Builder
	b.WriteString("| query (verb) | filter and sort | index | why it selects |\n")
	b.WriteString("| --- | --- | --- | --- |\n")
	for _, e := range mongostore.FleetQueries {
		var shapes []string
		for _, s := range e.Shapes {
			if s == "" {
				s = "{}"
			}
			shapes = append(shapes, "`"+s+"`")
		}
		filter := strings.Join(shapes, " · ")
		if len(e.Sort) > 0 {
			filter += "; sort `" + renderSort(e.Sort) + "`"
		}
		index := "`" + e.Index + "`"
		for _, a := range e.Alt {
			index += " or `" + a + "`"
		}
		fmt.Fprintf(&b, "| %s on %s: %s | %s | %s | %s |\n", e.Cmd, e.Coll, e.Verbs, filter, index, e.Why)
	}
	return b.String()
}
