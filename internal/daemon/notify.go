package daemon

import (
	"log/slog"

	sdnotify "github.com/coreos/go-systemd/v22/daemon"
)

// notifySystemd tells the service manager how Basin is doing (the unit is
// Type=notify, packaging/deb/basin.service): READY=1 once it is ready (/readyz
// answers), STOPPING=1 as it starts shutting down. Without NOTIFY_SOCKET (not
// started by systemd) it does nothing. The daemons Basin starts inherit
// NOTIFY_SOCKET, but they run in sandboxes whose mount and network namespaces
// do not reach it, and the unit takes notifications from Basin's own process
// only (NotifyAccess=main).
func notifySystemd(log *slog.Logger, state string) {
	if _, err := sdnotify.SdNotify(false, state); err != nil {
		log.Warn("notifying the service manager", "state", state, "err", err)
	}
}
