// Package filelock is the exclusive advisory file lock the test-support
// builders (internal/agentproc, internal/mongotest) take around a build
// they share between test binaries through the user's cache directory.
package filelock
