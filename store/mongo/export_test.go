package mongostore

import "go.mongodb.org/mongo-driver/v2/mongo"

// FleetQuery and FleetQueries expose the catalogue of queries and their
// indexes (indexes.go) to the tests that pin it.
type FleetQuery = fleetQuery

var FleetQueries = fleetQueries

// CardIndexes maps each cards index the store creates to its key fields,
// and _id_ to its.
func CardIndexes() map[string][]string {
	out := map[string][]string{idIndex: {"_id"}}
	for _, ix := range cardIndexes {
		out[ix.name] = ix.keys
	}
	return out
}

// CutOffReapers points s's reapers collection at a client that is already
// disconnected, so every record write and read fails in the driver, as
// they would for an agent whose database role cannot reach the collection.
// restore puts the real collection back.
func CutOffReapers(s *Store, disconnected *mongo.Client) (restore func()) {
	real := s.reapers
	s.reapers = disconnected.Database(s.db.Name()).Collection(collReapers)
	return func() { s.reapers = real }
}
