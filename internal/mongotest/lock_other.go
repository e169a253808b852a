//go:build !unix

package mongotest

// lockFile is a no-op where flock is unavailable: concurrent builds then
// race, and the atomic rename of the finished binary keeps the result sound.
func lockFile(string) (func(), error) { return func() {}, nil }
