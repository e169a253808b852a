package watchdog

import "errors"

var (
	// ErrInvalidConfig: the reaper's Config cannot run (missing store, bad
	// marker, a board without the columns the table files into...).
	ErrInvalidConfig = errors.New("invalid watchdog config")
	// ErrAlreadyStarted: Start was called on a running reaper.
	ErrAlreadyStarted = errors.New("watchdog already started")
)
