package agent

import (
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// notifier speaks systemd's notify protocol when the agent runs as a
// Type=notify unit; with NOTIFY_SOCKET unset every call does nothing. The
// unit relies on three promises:
//
//   - READY=1 only once the store is open, the boot sweep is done and the
//     socket listens, so units ordered after the agent find it serving;
//   - WATCHDOG=1 from the heartbeat loop itself, on every tick, so a hung
//     loop (the one thing that keeps leases alive) stops the pings and
//     systemd restarts the agent — a separate pinging goroutine would keep
//     a wedged agent looking healthy;
//   - STOPPING=1 as soon as shutdown begins.
type notifier struct {
	log *slog.Logger
	// watchdog is the unit's WatchdogSec as systemd passed it
	// (WATCHDOG_USEC, for this pid); zero means nobody is watching and no
	// WATCHDOG=1 is sent.
	watchdog time.Duration
}

func newNotifier(log *slog.Logger) *notifier {
	n := &notifier{log: log}
	d, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("systemd watchdog settings unreadable: no WATCHDOG=1 will be sent", "err", err)
		return n
	}
	n.watchdog = d
	return n
}

// checkInterval warns when the unit's watchdog is shorter than the longest
// gap the heartbeat can leave between two pings: a tick may wait on the
// store until the earliest trusted deadline (about one lease), and the next
// tick comes a heartbeat interval (lease/3) later. A shorter WatchdogSec
// would have systemd restart a healthy agent whenever the store is slow.
func (n *notifier) checkInterval(lease time.Duration) {
	if n.watchdog == 0 {
		return
	}
	if worst := lease + lease/3; n.watchdog < worst {
		n.log.Warn("systemd WatchdogSec is shorter than the worst gap between heartbeat ticks: a slow store will get the agent restarted",
			"watchdog", n.watchdog, "lease", lease, "want_at_least", worst)
	}
}

func (n *notifier) ready() { n.send(daemon.SdNotifyReady) }

// tick is called by the heartbeat loop after every tick.
func (n *notifier) tick() {
	if n.watchdog > 0 {
		n.send(daemon.SdNotifyWatchdog)
	}
}

func (n *notifier) stopping() { n.send(daemon.SdNotifyStopping) }

func (n *notifier) send(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		n.log.Warn("systemd notification failed", "state", state, "err", err)
	}
}
