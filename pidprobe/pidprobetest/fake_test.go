package pidprobetest

import (
	"context"
	"errors"
	"testing"

	"github.com/leasekeeper/leasekeeper/pidprobe"
)

func TestFakeFollowsProbeRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var f Fake
	f.Spawn(100, 5000)
	f.Spawn(200, 7000)
	f.SetUnknown(200, true)

	tests := []struct {
		name  string
		pid   int
		start int64
		want  pidprobe.Liveness
	}{
		{"matching start", 100, 5000, pidprobe.Alive},
		{"unknown start", 100, 0, pidprobe.Alive},
		{"reused pid", 100, 4000, pidprobe.Dead},
		{"never spawned", 300, 0, pidprobe.Dead},
		{"forced unknown", 200, 7000, pidprobe.Unknown},
		{"invisible peer", 0, 0, pidprobe.Unknown},
	}
	for _, tt := range tests {
		if got := f.Probe(ctx, tt.pid, tt.start); got != tt.want {
			t.Errorf("%s: Probe(%d, %d) = %v, want %v", tt.name, tt.pid, tt.start, got, tt.want)
		}
	}
	if got, want := f.Probes(), len(tests); got != want {
		t.Errorf("Probes() = %d, want %d", got, want)
	}

	f.Kill(100)
	if got := f.Probe(ctx, 100, 5000); got != pidprobe.Dead {
		t.Errorf("after Kill: Probe = %v, want dead", got)
	}
	if _, err := f.StartTime(ctx, 100); !errors.Is(err, pidprobe.ErrNoProcess) {
		t.Errorf("after Kill: StartTime err = %v, want ErrNoProcess", err)
	}
}
