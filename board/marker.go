package board

import (
	"strconv"
	"strings"
)

// RecoveryPrefix starts every recovery marker: the watchdog holds a card it
// reclaimed under "reaper:" + its own agent marker (DESIGN.md#recovery-marker).
const RecoveryPrefix = "reaper:"

// Marker is a parsed claim marker.
type Marker struct {
	Host     string
	PID      int
	Recovery bool // a "reaper:<host>-<pid>" recovery claim
}

// String formats the marker: "<host>-<pid>", or "reaper:<host>-<pid>".
func (m Marker) String() string {
	s := m.Host + "-" + strconv.Itoa(m.PID)
	if m.Recovery {
		return RecoveryPrefix + s
	}
	return s
}

// WorkerMarker formats the marker of a worker process.
func WorkerMarker(host string, pid int) string { return Marker{Host: host, PID: pid}.String() }

// RecoveryMarker turns an agent's own marker into its recovery marker.
func RecoveryMarker(agentMarker string) string {
	return RecoveryPrefix + strings.TrimPrefix(agentMarker, RecoveryPrefix)
}

// IsRecoveryMarker reports whether m is a watchdog recovery claim.
func IsRecoveryMarker(m string) bool { return strings.HasPrefix(m, RecoveryPrefix) }

// ParseMarker parses "<host>-<pid>" (split at the LAST dash, so host names
// with dashes work) or "reaper:<host>-<pid>". The pid must be > 1: pid 0 is
// what the kernel reports for an invisible peer and pid 1 is an init, never
// a worker.
func ParseMarker(s string) (Marker, error) {
	var m Marker
	rest := s
	if strings.HasPrefix(rest, RecoveryPrefix) {
		m.Recovery = true
		rest = rest[len(RecoveryPrefix):]
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 || i == len(rest)-1 {
		return Marker{}, Invalid("malformed marker %q: want <host>-<pid>", s)
	}
	m.Host = rest[:i]
	pid, err := strconv.Atoi(rest[i+1:])
	if err != nil || pid <= 1 {
		return Marker{}, Invalid("malformed marker %q: pid must be an integer > 1", s)
	}
	m.PID = pid
	if err := checkText("marker host", m.Host, 200); err != nil {
		return Marker{}, err
	}
	return m, nil
}

// ValidateMarker returns an ErrInvalidArgument error for a malformed marker.
func ValidateMarker(s string) error {
	_, err := ParseMarker(s)
	return err
}
