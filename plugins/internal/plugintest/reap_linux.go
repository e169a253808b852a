package plugintest

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BecomeSubreaper makes this test process adopt its orphaned descendants,
// so a test can wait4 a plugin whose parent it killed and learn exactly how
// the plugin died. It is process-wide: the tests using it do not run in
// parallel.
func BecomeSubreaper(t *testing.T) {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
}

// Reap waits for the adopted process pid to end, failing t (and killing it)
// if it is still alive after d.
func Reap(t *testing.T, pid int, d time.Duration) unix.WaitStatus {
	t.Helper()
	type result struct {
		ws  unix.WaitStatus
		err error
	}
	done := make(chan result, 1)
	go func() {
		for {
			var ws unix.WaitStatus
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			done <- result{ws, err}
			return
		}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("wait4(%d): %v", pid, r.err)
		}
		return r.ws
	case <-time.After(d):
		_ = unix.Kill(pid, unix.SIGKILL)
		t.Fatalf("plugin %d still alive %s after its parent was SIGKILLed", pid, d)
		return 0
	}
}
