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

// AgentMarker formats an agent's own marker: the actor of its events, and
// the base of its "reaper:" recovery marker and its "effects:" actor.
func AgentMarker(host string, pid int) string { return Marker{Host: host, PID: pid}.String() }

// RecoveryMarker turns an agent's own marker into its recovery marker.
func RecoveryMarker(agentMarker string) string {
	return RecoveryPrefix + strings.TrimPrefix(agentMarker, RecoveryPrefix)
}

// IsRecoveryMarker reports whether m is a watchdog recovery claim.
func IsRecoveryMarker(m string) bool { return strings.HasPrefix(m, RecoveryPrefix) }

// ParseMarker parses "<host>-<pid>" (split at the LAST dash, so host names
// with dashes work) or "reaper:<host>-<pid>".
//
// A worker's pid must be > 1: pid 0 is what the kernel reports for an
// invisible peer and pid 1 is an init, never a worker. A recovery marker
// names an agent, and an agent may be pid 1: it is the init of its own
// container when the workers join its pid namespace (compose `pid:
// service:...`). That container's host name is its own, so the agent's
// marker still names one process.
func ParseMarker(s string) (Marker, error) {
	rest, recovery := strings.CutPrefix(s, RecoveryPrefix)
	minPID := 2
	if recovery {
		minPID = 1
	}
	m, err := parseHostPID(s, rest, minPID)
	m.Recovery = recovery
	return m, err
}

// ParseAgentMarker parses an agent's own marker, "<host>-<pid>", where the
// pid may be 1 (see ParseMarker). A recovery marker is refused: it is
// derived from the agent's marker, never the agent's marker itself.
func ParseAgentMarker(s string) (Marker, error) {
	if IsRecoveryMarker(s) {
		return Marker{}, Invalid("agent marker %q is a recovery marker: want <host>-<pid>", s)
	}
	return parseHostPID(s, s, 1)
}

func parseHostPID(s, rest string, minPID int) (Marker, error) {
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 || i == len(rest)-1 {
		return Marker{}, Invalid("malformed marker %q: want <host>-<pid>", s)
	}
	m := Marker{Host: rest[:i]}
	pid, err := strconv.Atoi(rest[i+1:])
	if err != nil || pid < minPID {
		return Marker{}, Invalid("malformed marker %q: pid must be an integer >= %d", s, minPID)
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

// ValidateAgentMarker returns an ErrInvalidArgument error for a malformed
// agent marker (see ParseAgentMarker).
func ValidateAgentMarker(s string) error {
	_, err := ParseAgentMarker(s)
	return err
}
