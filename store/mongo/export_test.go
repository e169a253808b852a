package mongostore

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
