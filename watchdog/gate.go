package watchdog

import (
	"fmt"
	"strings"
)

// GateEnv is the environment variable that gates the reaper's decisions
// (ADR-096 §8, §9: default off, as in the ADR's release N).
const GateEnv = "LEASEKEEPER_REAPER"

// ParseGate reads the value of LEASEKEEPER_REAPER. "1", "true", "on" and
// "yes" (any case, surrounding space ignored) turn the gate on; "0",
// "false", "off", "no" and the empty value leave it off. Anything else
// leaves it off too — the gate is the lever an operator pulls when they
// judge the watchdog wrong, so a typo must never switch decisions on — and
// returns one warning naming the value.
func ParseGate(v string) (enabled bool, warning string) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "on", "yes":
		return true, ""
	case "", "0", "false", "off", "no":
		return false, ""
	default:
		return false, fmt.Sprintf("%s=%q is not a boolean (want 1/true/on/yes or 0/false/off/no): the reaper stays off", GateEnv, v)
	}
}
