package agent

import (
	"log/slog"

	"github.com/coreos/go-systemd/v22/daemon"
)

// sdNotify tells systemd about the agent's state when it runs as a
// Type=notify unit; it does nothing elsewhere (NOTIFY_SOCKET unset). The
// unit relies on it: READY=1 only once the boot sweep is done and the
// socket serves, WATCHDOG=1 from the heartbeat loop itself so a hung loop
// gets the agent restarted.
func sdNotify(log *slog.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Debug("systemd notification failed", "state", state, "err", err)
	}
}
