package mongostore

import (
	"go.mongodb.org/mongo-driver/v2/bson"
)

// The fleet's indexes and the queries they serve (DESIGN.md#fleet-indexes).
//
// Every query the twin sends is listed in fleetQueries with the index that
// serves it, and every index createIndexes makes is one of the variables
// below. A compound index that serves a sorted listing is built from the
// listing's own sort document (its equality fields, then the sort keys,
// _id tiebreak included), so the index and the sort cannot disagree. The
// event log's queries (the events collection, the pending outboxes by
// their stamp) are not here: DESIGN.md#event-log lists them.

// The sort orders of the listings. Each is the suffix of the index that
// serves its listing.
var (
	// creationOrder sorts cards oldest first.
	creationOrder = bson.D{{Key: "created_seq", Value: 1}, {Key: "_id", Value: 1}}
	// leaseOrder is the lease arm's: the earliest ended lease first.
	leaseOrder = bson.D{{Key: "claim_lease_until", Value: 1}, {Key: "_id", Value: 1}}
	// updateOrder is the un-leased listings': the oldest update first.
	updateOrder = bson.D{{Key: "updated_at", Value: 1}, {Key: "_id", Value: 1}}
)

// idIndex is the index every collection has on _id.
const idIndex = "_id_"

// sortedBy is an index whose leading fields are the equality fields and
// whose suffix is the sort order, field by field.
func sortedBy(name string, order bson.D, equality ...string) index {
	keys := append([]string(nil), equality...)
	for _, e := range order {
		keys = append(keys, e.Key)
	}
	return index{name: name, keys: keys}
}

// The cards collection's indexes.
var (
	// ixQueue: ClaimNext's and Start next's candidates. Both equality
	// fields are $in lists of points, so the server merges one ordered
	// scan per (state, claim) pair instead of sorting.
	ixQueue = sortedBy("state_claim_created_id", creationOrder, "state", "claim")
	// ixLabelQueue: ClaimNext's and Start next's candidates routed by
	// labels (a multikey index: one key per label of a card), then as
	// ixQueue.
	ixLabelQueue = sortedBy("labels_state_claim_created_id", creationOrder, "labels", "state", "claim")
	// ixCreated: ListCards with no filter.
	ixCreated = sortedBy("created_id", creationOrder)
	// ixStateCreated: ListCards by state.
	ixStateCreated = sortedBy("state_created_id", creationOrder, "state")
	// ixClaim: the claimed-card listings (boot sweep, recovery sweep): a
	// range of markers.
	ixClaim = index{name: "claim", keys: []string{"claim"}}
	// ixDependents: a card's dependents, in creation order.
	ixDependents = sortedBy("depends_on_created_id", creationOrder, "depends_on")
	// ixLease: the expired-candidate listing's lease arm.
	ixLease = sortedBy("claim_lease_until_id", leaseOrder)
	// ixUnleasedClaims: the candidate listing's un-leased arm. "No lease"
	// is shared by every free card, so the claim range follows it: the
	// scan covers the un-leased claims only.
	ixUnleasedClaims = sortedBy("unleased_claim_updated_id", updateOrder, "claim_lease_until", "claim")
	// ixUnleasedRunning: the un-leased sweep's listing (no lease, the
	// running column), oldest update first.
	ixUnleasedRunning = sortedBy("unleased_state_updated_id", updateOrder, "claim_lease_until", "state")
	// ixRun: a run embedded in its card.
	ixRun = index{name: "run_id", keys: []string{fieldRun + ".id"}}
	// ixRuns: the card that lists a run id (a multikey index: one key per
	// run a card ever pointed at).
	ixRuns = index{name: "runs", keys: []string{"runs"}}
	// ixPrune: retention's listing (DESIGN.md#retention): the sink cards
	// that still embed a run, oldest run first. A card whose run was
	// pruned embeds none and has no key past the state.
	ixPrune = sortedBy("state_run_updated_id", runUpdateOrder, "state")
)

// cardIndexes are the cards indexes the queries rely on. Indexes earlier
// versions made (claim_lease_until, state_created, created, updated_at,
// depends_on) are no longer created and never dropped: an older agent of
// the same fleet may still be sending the queries they served.
var cardIndexes = []index{
	ixQueue, ixLabelQueue, ixCreated, ixStateCreated, ixClaim, ixDependents,
	ixLease, ixUnleasedClaims, ixUnleasedRunning, ixRun, ixRuns, ixPrune,
}

// fleetQuery is one shape of query the twin sends and the index that
// serves it.
type fleetQuery struct {
	// Verbs names the Store methods (or helpers) that send it.
	Verbs string
	// Coll and Cmd: the collection and the command (find,
	// findAndModify, update).
	Coll, Cmd string
	// Shapes are the filters it sends: top-level fields in the order the
	// code sends them, each "= " (equality; "= null" for null) or its
	// operators; "…" last stands for further conditions of any shape.
	// A query matches when its filter has one of these shapes.
	Shapes []string
	// Sort is the sort document, "" for none.
	Sort bson.D
	// Index is the index that serves it; Alt lists indexes the server's
	// planner may pick instead, each as selective.
	Index string
	Alt   []string
	// MemSort: the index selects a range that cannot also give the
	// order, so the selected cards (and only they) are sorted in memory.
	MemSort bool
	// Why says why the index selects.
	Why string
}

// fleetQueries lists every query the twin sends outside the event log.
var fleetQueries = []fleetQuery{
	{
		Verbs: "readCard (every read and write of a card), CreateCard", Coll: collCards, Cmd: "find",
		Shapes: []string{"_id ="}, Index: idIndex,
		Why: "one key of the unique _id index",
	},
	{
		Verbs: "blockers, readBackRenewed", Coll: collCards, Cmd: "find",
		Shapes: []string{"_id $in"}, Index: idIndex,
		Why: "one key per listed id",
	},
	{
		Verbs: "mutate (every card write's compare-and-set), DeleteCard", Coll: collCards, Cmd: "findAndModify",
		Shapes: []string{"_id = …"}, Index: idIndex,
		Why: "one key of the unique _id index; the other conditions are checked on that one card",
	},
	{
		Verbs: "RenewClaims, reopenOnce, breakReopens", Coll: collCards, Cmd: "update",
		Shapes: []string{"_id = …", "_id $in"}, Index: idIndex,
		Why: "one key per id; the other conditions are checked on those cards",
	},
	{
		Verbs: "cardOfRun (GetRun, UpdateRun, Start, CreateRun)", Coll: collCards, Cmd: "find",
		Shapes: []string{"run.id ="}, Index: ixRun.name,
		Why: "run ids are unique: at most one key",
	},
	{
		Verbs: "cardListingRun (Start: a retry, or a run id taken)", Coll: collCards, Cmd: "find",
		Shapes: []string{"runs ="}, Index: ixRuns.name,
		Why: "a run id is listed by one card: at most one key of the multikey index",
	},
	{
		Verbs: "ListCards (no filter), CountCards", Coll: collCards, Cmd: "find",
		Shapes: []string{""}, Sort: creationOrder, Index: ixCreated.name,
		Why: "the listing is every card; the index gives the order, and a limit stops the scan early",
	},
	{
		Verbs: "ListCards (State)", Coll: collCards, Cmd: "find",
		Shapes: []string{"state ="}, Sort: creationOrder, Index: ixStateCreated.name,
		Why: "equality on state, then the sort keys: the state's cards, in order",
	},
	{
		Verbs: "ListCards (ClaimedOnly, RecoveryOnly, ClaimHosts; with or without State)", Coll: collCards, Cmd: "find",
		Shapes: []string{"claim $gt", "claim $regex", "claim $in", "state =, claim $gt", "state =, claim $regex", "state =, claim $in"},
		Sort:   creationOrder, Index: ixClaim.name, Alt: []string{ixStateCreated.name}, MemSort: true,
		Why: "a range of markers (claimed, an anchored prefix per host or recovery marker): the claims held, sorted in memory; with State the planner may take that state's cards in order instead",
	},
	{
		Verbs: "Dependents, reopenOnce, promoteDependents", Coll: collCards, Cmd: "find",
		Shapes: []string{"depends_on =", "depends_on =, state ="}, Sort: creationOrder, Index: ixDependents.name,
		Why: "equality on one blocker, then the sort keys: that card's dependents, in order",
	},
	{
		Verbs: "ClaimNext, Start (Next)", Coll: collCards, Cmd: "find",
		Shapes: []string{"state $in, claim $in, retry_at $not", "state $in, claim $in, run.status $nin, retry_at $not"},
		Sort:   creationOrder, Index: ixQueue.name, Alt: []string{ixStateCreated.name},
		Why: "points on state (the pool states) and claim (free: \"\" or none), then the sort keys: the free pool cards, one ordered scan per point merged, the first 8 read; a card backing off (retry_at) is passed over on the index's cards, not read; the planner may take the pool states' cards in order instead, passing over the claimed ones",
	},
	{
		Verbs: "ClaimNext, Start (Next) routed by labels", Coll: collCards, Cmd: "find",
		Shapes: []string{"labels =, state $in, claim $in, retry_at $not", "labels $all, state $in, claim $in, retry_at $not",
			"labels =, state $in, claim $in, run.status $nin, retry_at $not", "labels $all, state $in, claim $in, run.status $nin, retry_at $not"},
		Sort: creationOrder, Index: ixLabelQueue.name, Alt: []string{ixQueue.name, ixStateCreated.name},
		Why: "a point on one label (of $all, the planner bounds one and checks the rest), then points on state and claim and the sort keys: the free pool cards carrying the label, in order; the planner may take the unrouted queue instead when the label is common",
	},
	{
		Verbs: "ListExpiredClaimCandidates (lease arm; $and: a reaper's share)", Coll: collCards, Cmd: "find",
		Shapes: []string{"claim $gt, claim_lease_until $lte", "claim $gt, claim_lease_until $lte, $or",
			"claim $gt, claim_lease_until $lte, $and", "claim $gt, claim_lease_until $lte, $or, $and"},
		Sort: leaseOrder, Index: ixLease.name,
		Why: "a range of ended leases, in the sort's order: the expired claims only; a share's share-key condition is checked on those, so a page of a share among n reapers reads about n pages of the range",
	},
	{
		Verbs: "ListExpiredClaimCandidates (un-leased arm; $and: a reaper's share)", Coll: collCards, Cmd: "find",
		Shapes: []string{"claim $gt, claim_lease_until = null, updated_at $lte", "claim $gt, claim_lease_until = null, updated_at $lte, $or",
			"claim $gt, claim_lease_until = null, updated_at $lte, $and", "claim $gt, claim_lease_until = null, updated_at $lte, $or, $and"},
		Sort: updateOrder, Index: ixUnleasedClaims.name, MemSort: true,
		Why: "no lease, then the claim range: the un-leased claims only (a free card has no lease either, but no claim), sorted in memory",
	},
	{
		Verbs: "reaperShare (record this reaper)", Coll: collReapers, Cmd: "update",
		Shapes: []string{"_id ="}, Index: idIndex,
		Why: "one key of the unique _id index",
	},
	{
		Verbs: "reaperShare (the reapers)", Coll: collReapers, Cmd: "find",
		Shapes: []string{""}, Sort: bson.D{{Key: "_id", Value: 1}}, Index: idIndex,
		Why: "the listing is every reaper, one small document per agent, in the index's order",
	},
	{
		Verbs: "reaperShare (forget the long gone), retireReapers (Close)", Coll: collReapers, Cmd: "delete",
		Shapes: []string{"_id $in, until $lt", "_id $in"}, Index: idIndex,
		Why: "one key per listed reaper",
	},
	{
		Verbs: "ListUnleasedRunningClaims", Coll: collCards, Cmd: "find",
		Shapes: []string{"claim $gt, claim_lease_until = null, state =, last_run_id $gt, updated_at $lte"},
		Sort:   updateOrder, Index: ixUnleasedRunning.name,
		Why: "no lease and the running column, then updated_at: un-leased cards in the running column (a free card is filed out of it), in order",
	},
	{
		Verbs: "readArchivedRun", Coll: collRuns, Cmd: "find",
		Shapes: []string{"_id ="}, Index: idIndex,
		Why: "one key of the unique _id index",
	},
	{
		Verbs: "archiveRun, settle", Coll: collRuns, Cmd: "update",
		Shapes: []string{"_id =, $or"}, Index: idIndex,
		Why: "one key of the unique _id index",
	},
	{
		Verbs: "readBoard", Coll: collMeta, Cmd: "find",
		Shapes: []string{"_id ="}, Index: idIndex,
		Why: "the one board document",
	},
	{
		Verbs: "SetBoard", Coll: collMeta, Cmd: "update",
		Shapes: []string{"_id =, version ="}, Index: idIndex,
		Why: "the one board document",
	},
	{
		Verbs: "Prune (finished cards that embed an old run)", Coll: collCards, Cmd: "find",
		Shapes: []string{"state $in, run.updated_at $lt, claim $in, updated_at $lt"},
		Sort:   runUpdateOrder, Index: ixPrune.name,
		Why: "points on state (the sinks), then the embedded run's last update in the sort's order: the finished cards whose run is older than the cutoff only (a pruned card embeds none); claim and updated_at are checked on those",
	},
	{
		Verbs: "Prune, DeleteCard (a dry run counts)", Coll: collRuns, Cmd: "find",
		Shapes: []string{"_id $in, updated_at $lt", "_id $in"}, Index: idIndex,
		Why: "one key per run the card lists",
	},
	{
		Verbs: "Prune, DeleteCard", Coll: collRuns, Cmd: "delete",
		Shapes: []string{"_id $in, updated_at $lt", "_id $in"}, Index: idIndex,
		Why: "one key per run the card lists",
	},
	{
		Verbs: "stampNow (DeleteCard's event)", Coll: collMeta, Cmd: "findAndModify",
		Shapes: []string{"_id ="}, Index: idIndex,
		Why: "one small document",
	},
}
