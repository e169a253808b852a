//go:build !linux

package plugins

import "os/exec"

// Other systems have no parent-death signal; the agent is built for Linux
// (systemd units and containers), where parentdeath_linux.go applies.

func setParentDeathSignal(*exec.Cmd) {}

func runLocked(cmd *exec.Cmd, started chan<- error, wait func(error)) {
	go func() {
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		wait(cmd.Wait())
	}()
}
