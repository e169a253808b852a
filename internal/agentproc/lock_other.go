//go:build !unix

package agentproc

import "errors"

// lockFile is unavailable where flock is: Main then builds into its own
// temporary directory, as it would with no cache.
func lockFile(string) (func(), error) { return nil, errors.New("no file locks here") }
