package pidprobe

import "errors"

// ErrNoProcess is returned by StartTime when no process has the pid.
var ErrNoProcess = errors.New("no such process")

// ErrInvalidPID is returned for a pid that can never name a worker (<= 0:
// pid 0 is what SO_PEERCRED reports for a peer in a foreign pid namespace).
var ErrInvalidPID = errors.New("invalid pid")
