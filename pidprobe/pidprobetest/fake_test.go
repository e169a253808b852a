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
		name string
		pid  int
		rec  pidprobe.Identity
		want pidprobe.Liveness
	}{
		{"matching identity", 100, ID(5000), pidprobe.Alive},
		{"unknown identity", 100, pidprobe.Identity{}, pidprobe.Alive},
		{"reused pid", 100, ID(4000), pidprobe.Dead},
		{"reused pid one tick later", 100, ID(4999), pidprobe.Dead},
		{"legacy record within the tolerance", 100, pidprobe.Identity{StartMillis: 5500}, pidprobe.Alive},
		{"legacy record beyond it", 100, pidprobe.Identity{StartMillis: 9000}, pidprobe.Dead},
		{"never spawned", 300, pidprobe.Identity{}, pidprobe.Dead},
		{"forced unknown", 200, ID(7000), pidprobe.Unknown},
		{"invisible peer", 0, pidprobe.Identity{}, pidprobe.Unknown},
	}
	for _, tt := range tests {
		if got := f.Probe(ctx, tt.pid, tt.rec); got != tt.want {
			t.Errorf("%s: Probe(%d, %+v) = %v, want %v", tt.name, tt.pid, tt.rec, got, tt.want)
		}
	}
	if id, err := f.Identify(ctx, 100); err != nil || id != ID(5000) {
		t.Errorf("Identify(100) = %+v, %v; want %+v", id, err, ID(5000))
	}
	if got, want := f.Probes(), len(tests); got != want {
		t.Errorf("Probes() = %d, want %d", got, want)
	}

	f.Kill(100)
	if got := f.Probe(ctx, 100, ID(5000)); got != pidprobe.Dead {
		t.Errorf("after Kill: Probe = %v, want dead", got)
	}
	if _, err := f.Identify(ctx, 100); !errors.Is(err, pidprobe.ErrNoProcess) {
		t.Errorf("after Kill: Identify err = %v, want ErrNoProcess", err)
	}
}
