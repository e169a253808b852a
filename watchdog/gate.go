package watchdog

import (
	"fmt"
	"strings"
)

// GateEnv is the environment variable that gates the reaper's decisions
// (DESIGN.md#gate). When set it wins over the agent's reaper.enabled (on
// by default): it is the operator's kill switch, and what release N of the
// rollout sets to 0 (DESIGN.md#release-n).
const GateEnv = "LEASEKEEPER_REAPER"

// ParseGate reads the value of LEASEKEEPER_REAPER. "1", "t", "true", "on",
// "y" and "yes" (any case, surrounding space ignored) turn the gate on;
// "0", "f", "false", "off", "n", "no" and the empty value leave it off —
// the spellings strconv.ParseBool and YAML users reach for. Anything else
// turns it off too — the gate is the lever an operator pulls when they
// judge the watchdog wrong, so a typo in it must never leave decisions
// on — and returns one warning naming the value.
func ParseGate(v string) (enabled bool, warning string) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "t", "true", "on", "y", "yes":
		return true, ""
	case "", "0", "f", "false", "off", "n", "no":
		return false, ""
	default:
		return false, fmt.Sprintf("%s=%q is not a boolean (want 1/t/true/on/y/yes or 0/f/false/off/n/no): the watchdog's decisions are off", GateEnv, v)
	}
}
