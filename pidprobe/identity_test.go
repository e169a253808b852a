package pidprobe

import "testing"

func TestCompare(t *testing.T) {
	t.Parallel()
	exact := Identity{BootID: "boot-a", StartTicks: 5000, Inode: 77, StartMillis: 1_700_000_050_000}
	tests := []struct {
		name     string
		rec, cur Identity
		want     Match
	}{
		{"same process", exact, exact, MatchSame},
		{"the millis differ, as two gopsutil reads may", exact, Identity{BootID: "boot-a", StartTicks: 5000, Inode: 77, StartMillis: 1_700_000_049_000}, MatchSame},
		{"one tick later", exact, Identity{BootID: "boot-a", StartTicks: 5001, Inode: 78, StartMillis: exact.StartMillis}, MatchOther},
		{"same tick, another pidfs inode", exact, Identity{BootID: "boot-a", StartTicks: 5000, Inode: 78}, MatchOther},
		{"same tick, no inode on one side", exact, Identity{BootID: "boot-a", StartTicks: 5000}, MatchSame},
		{"another boot", exact, Identity{BootID: "boot-b", StartTicks: 5000, Inode: 77}, MatchOther},
		{"boot unknown on one side", Identity{StartTicks: 5000}, exact, MatchSame},
		{"current not exact", exact, Identity{StartMillis: exact.StartMillis}, MatchUnknown},
		{"unknown record matches anything", Identity{}, exact, MatchSame},
		{"legacy record, same millis", Identity{StartMillis: exact.StartMillis}, exact, MatchSame},
		{"legacy record within the tolerance", Identity{StartMillis: exact.StartMillis - LegacyTolerance.Milliseconds()}, exact, MatchSame},
		{"legacy record beyond the tolerance", Identity{StartMillis: exact.StartMillis - LegacyTolerance.Milliseconds() - 1}, exact, MatchOther},
		{"legacy record, current without millis", Identity{StartMillis: 1}, Identity{StartTicks: 5}, MatchUnknown},
	}
	for _, tt := range tests {
		if got := Compare(tt.rec, tt.cur); got != tt.want {
			t.Errorf("%s: Compare(%+v, %+v) = %v, want %v", tt.name, tt.rec, tt.cur, got, tt.want)
		}
	}
}
