package watchdog

import (
	"fmt"
	"strings"
)

// GateEnv is the environment variable that gates the reaper's decisions
// (DESIGN.md#gate): default off, as release N of the rollout needs
// (DESIGN.md#release-n).
const GateEnv = "LEASEKEEPER_REAPER"

// ParseGate reads the value of LEASEKEEPER_REAPER. "1", "t", "true", "on",
// "y" and "yes" (any case, surrounding space ignored) turn the gate on;
// "0", "f", "false", "off", "n", "no" and the empty value leave it off —
// the spellings strconv.ParseBool and YAML users reach for. Anything else
// leaves it off too — the gate is the lever an operator pulls when they
// judge the watchdog wrong, so a typo must never switch decisions on — and
// returns one warning naming the value.
func ParseGate(v string) (enabled bool, warning string) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "t", "true", "on", "y", "yes":
		return true, ""
	case "", "0", "f", "false", "off", "n", "no":
		return false, ""
	default:
		return false, fmt.Sprintf("%s=%q is not a boolean (want 1/t/true/on/y/yes or 0/f/false/off/n/no): the reaper stays off", GateEnv, v)
	}
}
