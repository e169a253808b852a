package boardtest

import (
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// hb builds a hand-written history for one card, each operation one tick
// after the previous unless given explicit bounds.
type hb struct {
	ops  []stressOp
	tick int64
}

func tk(m string, e int64) board.ClaimToken { return board.ClaimToken{Marker: m, Epoch: e} }

func (b *hb) add(kind opKind, marker string, tok board.ClaimToken, out stressOutput) *hb {
	b.tick += 2
	return b.at(b.tick-1, b.tick, kind, marker, tok, out)
}

func (b *hb) at(call, ret int64, kind opKind, marker string, tok board.ClaimToken, out stressOutput) *hb {
	b.ops = append(b.ops, stressOp{Client: len(b.ops), In: stressInput{Kind: kind, Card: "c", Marker: marker, Token: tok}, Out: out, Call: call, Return: ret})
	return b
}

func granted(tok board.ClaimToken) stressOutput { return stressOutput{OK: true, Token: tok} }

var accepted = stressOutput{OK: true}

func conflict(holder string, epoch int64) stressOutput {
	return stressOutput{Conflict: true, Named: true, Holder: holder, Epoch: epoch}
}

// goodHistory is a legal run: A claims, writes, its lease is ended, a
// reaper transfers, A's late write is refused, the reaper releases, B claims.
func goodHistory() *hb {
	b := &hb{}
	b.add(opClaim, "a-10", board.ClaimToken{}, granted(tk("a-10", 1)))
	b.add(opWrite, "", tk("a-10", 1), accepted)
	b.add(opClaim, "b-20", board.ClaimToken{}, conflict("a-10", 1))
	b.add(opExpire, "", tk("a-10", 1), accepted)
	b.add(opReclaim, "reaper:r-30", tk("a-10", 1), granted(tk("reaper:r-30", 2)))
	b.add(opWrite, "", tk("a-10", 1), conflict("reaper:r-30", 2))
	b.add(opRelease, "", tk("a-10", 1), conflict("reaper:r-30", 2))
	b.add(opRenew, "", tk("reaper:r-30", 2), accepted)
	b.add(opRelease, "", tk("reaper:r-30", 2), accepted)
	b.add(opRelease, "", tk("a-10", 1), accepted) // a free card: nil
	b.add(opClaim, "b-20", board.ClaimToken{}, granted(tk("b-20", 3)))
	b.add(opClaim, "b-20", board.ClaimToken{}, granted(tk("b-20", 3)))
	return b
}

func TestCheckStressHistory(t *testing.T) {
	cases := []struct {
		name string
		hist func() *hb
		// wantStrict / wantFleet: a fragment every violation report must
		// contain, or "" for a clean history.
		wantStrict, wantFleet string
	}{
		{"Legal", goodHistory, "", ""},
		{"ConcurrentClaimsOneWinner", func() *hb {
			b := &hb{}
			b.at(1, 6, opClaim, "a-10", board.ClaimToken{}, granted(tk("a-10", 1)))
			b.at(2, 4, opClaim, "b-20", board.ClaimToken{}, conflict("a-10", 1))
			return b
		}, "", ""},
		{"FleetEpochFloorJumps", func() *hb {
			b := &hb{}
			b.add(opClaim, "a-10", board.ClaimToken{}, granted(tk("a-10", 1_800_000_000_000)))
			b.add(opRelease, "", tk("a-10", 1_800_000_000_000), accepted)
			b.add(opClaim, "a-10", board.ClaimToken{}, granted(tk("a-10", 1_800_000_000_500)))
			return b
		}, "not linearizable", ""},
		{"SupersededWriteAccepted", func() *hb {
			b := goodHistory()
			b.add(opWrite, "", tk("a-10", 1), accepted)
			return b
		}, "superseded token a-10@1", "superseded token a-10@1"},
		{"SupersededRenewAccepted", func() *hb {
			b := goodHistory()
			b.add(opRenew, "", tk("reaper:r-30", 2), accepted)
			return b
		}, "superseded token reaper:r-30@2", "superseded token reaper:r-30@2"},
		{"EpochGoesBack", func() *hb {
			b := &hb{}
			b.add(opClaim, "a-10", board.ClaimToken{}, granted(tk("a-10", 5)))
			b.add(opRelease, "", tk("a-10", 5), accepted)
			b.add(opClaim, "b-20", board.ClaimToken{}, granted(tk("b-20", 3)))
			return b
		}, "epoch went from 5 to 3", "epoch went from 5 to 3"},
		{"SameEpochTwoHolders", func() *hb {
			b := &hb{}
			b.at(1, 4, opClaim, "a-10", board.ClaimToken{}, granted(tk("a-10", 1)))
			b.at(2, 3, opClaim, "b-20", board.ClaimToken{}, granted(tk("b-20", 1)))
			return b
		}, "granted to two holders", "granted to two holders"},
		{"TwoHoldersAtOnce", func() *hb {
			// Epochs increase, so only the one-holder model catches it.
			b := &hb{}
			b.add(opClaim, "a-10", board.ClaimToken{}, granted(tk("a-10", 1)))
			b.add(opClaim, "b-20", board.ClaimToken{}, granted(tk("b-20", 2)))
			return b
		}, "not linearizable", "not linearizable"},
		{"WriteByNonHolderAccepted", func() *hb {
			b := &hb{}
			b.add(opClaim, "a-10", board.ClaimToken{}, granted(tk("a-10", 1)))
			b.add(opWrite, "", tk("b-20", 1), accepted)
			return b
		}, "not linearizable", "not linearizable"},
		{"ReleaseKeptNoFence", func() *hb {
			// After a release the old token must not write again.
			b := &hb{}
			b.add(opClaim, "a-10", board.ClaimToken{}, granted(tk("a-10", 1)))
			b.add(opRelease, "", tk("a-10", 1), accepted)
			b.add(opWrite, "", tk("a-10", 1), accepted)
			return b
		}, "not linearizable", "not linearizable"},
		{"TransferOfLiveLease", func() *hb {
			b := &hb{}
			b.add(opClaim, "a-10", board.ClaimToken{}, granted(tk("a-10", 1)))
			b.add(opReclaim, "reaper:r-30", tk("a-10", 1), granted(tk("reaper:r-30", 2)))
			return b
		}, "not linearizable", ""},
		{"TransferOfRenewedLease", func() *hb {
			b := &hb{}
			b.add(opClaim, "a-10", board.ClaimToken{}, granted(tk("a-10", 1)))
			b.add(opExpire, "", tk("a-10", 1), accepted)
			b.add(opRenew, "", tk("a-10", 1), accepted)
			b.add(opReclaim, "reaper:r-30", tk("a-10", 1), granted(tk("reaper:r-30", 2)))
			return b
		}, "not linearizable", ""},
		{"ExpiredTransferRefused", func() *hb {
			b := &hb{}
			b.add(opClaim, "a-10", board.ClaimToken{}, granted(tk("a-10", 1)))
			b.add(opExpire, "", tk("a-10", 1), accepted)
			b.add(opReclaim, "reaper:r-30", tk("a-10", 1), conflict("a-10", 1))
			return b
		}, "not linearizable", ""},
		{"TransferOfWrongPrev", func() *hb {
			b := &hb{}
			b.add(opClaim, "a-10", board.ClaimToken{}, granted(tk("a-10", 1)))
			b.add(opExpire, "", tk("a-10", 1), accepted)
			b.add(opReclaim, "reaper:r-30", tk("b-20", 1), granted(tk("reaper:r-30", 2)))
			return b
		}, "not linearizable", "not linearizable"},
		{"ConflictNamesWrongHolder", func() *hb {
			b := &hb{}
			b.add(opClaim, "a-10", board.ClaimToken{}, granted(tk("a-10", 1)))
			b.add(opClaim, "b-20", board.ClaimToken{}, conflict("c-30", 7))
			return b
		}, "not linearizable", ""},
		{"FreeClaimRefused", func() *hb {
			b := &hb{}
			b.add(opClaim, "a-10", board.ClaimToken{}, conflict("", 0))
			return b
		}, "not linearizable", "not linearizable"},
		{"IdempotentReclaimChangedEpoch", func() *hb {
			b := &hb{}
			b.add(opClaim, "a-10", board.ClaimToken{}, granted(tk("a-10", 1)))
			b.add(opClaim, "a-10", board.ClaimToken{}, granted(tk("a-10", 2)))
			return b
		}, "not linearizable", "not linearizable"},
	}
	for _, tc := range cases {
		for _, mode := range []struct {
			name   string
			strict bool
			want   string
		}{{"Local", true, tc.wantStrict}, {"Fleet", false, tc.wantFleet}} {
			t.Run(tc.name+"/"+mode.name, func(t *testing.T) {
				t.Parallel()
				got := checkStressHistory(tc.hist().ops, mode.strict, 10*time.Second)
				if mode.want == "" {
					if len(got) != 0 {
						t.Errorf("a legal history was reported: %s", strings.Join(got, "\n"))
					}
					return
				}
				if len(got) == 0 {
					t.Fatalf("an illegal history passed the checker, want a report containing %q", mode.want)
				}
				if joined := strings.Join(got, "\n"); !strings.Contains(joined, mode.want) {
					t.Errorf("report = %s\nwant it to contain %q", joined, mode.want)
				}
			})
		}
	}
}

func TestManualClock(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewManualClock(t0)
	if got := c.Now(); !got.Equal(t0) {
		t.Errorf("Now() = %s, want %s", got, t0)
	}
	if got, want := c.Advance(90*time.Second), t0.Add(90*time.Second); !got.Equal(want) || !c.Now().Equal(want) {
		t.Errorf("after Advance(90s) Now() = %s, want %s", c.Now(), want)
	}
	c.Set(t0)
	if got := c.Now(); !got.Equal(t0) {
		t.Errorf("after Set Now() = %s, want %s", got, t0)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			c.Advance(time.Millisecond)
		}
	}()
	for range 1000 {
		_ = c.Now()
	}
	<-done
	if got, want := c.Now(), t0.Add(time.Second); !got.Equal(want) {
		t.Errorf("after 1000 concurrent 1ms advances Now() = %s, want %s", got, want)
	}
}
