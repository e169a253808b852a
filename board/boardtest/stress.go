package boardtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasekeeper/leasekeeper/board"
)

// StressOptions bounds StressFencing in size, time and count.
type StressOptions struct {
	Cards   int // cards fought over; default 3
	Workers int // concurrent workers; default 6
	// Duration and Ops bound the run. A run whose history has not yet
	// exercised the fence when they are spent (a slow backend on a loaded
	// machine) carries on until it has, up to four times either bound, so
	// the check neither passes vacuously nor fails for want of time.
	Duration time.Duration // wall-time bound; default 2s
	Ops      int           // total operation bound; default 1500
	// Seed makes the workers' choices reproducible (the interleaving is
	// still the scheduler's); 0 picks one and logs it.
	Seed uint64
}

func (o StressOptions) withDefaults() StressOptions {
	if o.Cards <= 0 {
		o.Cards = 3
	}
	if o.Workers <= 0 {
		o.Workers = 6
	}
	if o.Duration <= 0 {
		o.Duration = 2 * time.Second
	}
	if o.Ops <= 0 {
		o.Ops = 1500
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	return o
}

// opKind is one kind of operation in a stress history.
type opKind int

const (
	opClaim   opKind = iota // Claim(card, marker)
	opWrite                 // an owner write (SetStateOwned, SetLastRunOwned, SetAwaitingInputOwned) with token
	opRenew                 // RenewClaims with one hold
	opExpire                // ExpireClaimOwned
	opRelease               // ReleaseOwned
	opReclaim               // ReclaimExpired(prev = token) to marker
)

func (k opKind) String() string {
	return [...]string{"claim", "write", "renew", "expire", "release", "reclaim"}[k]
}

// stressInput is what an operation asked for.
type stressInput struct {
	Kind   opKind
	Card   string
	Marker string           // claim: the claimant; reclaim: the recovery marker
	Token  board.ClaimToken // owner verbs: the token presented; reclaim: prev
}

// stressOutput is what the store answered.
type stressOutput struct {
	OK       bool
	Token    board.ClaimToken // claim and reclaim: the token granted
	Conflict bool             // refused with ErrClaimConflict
	Named    bool             // the conflict carried a holder and epoch
	Holder   string
	Epoch    int64
}

// stressOp is one completed operation with its real-time interval: Call and
// Return come from one shared counter, so a.Return < b.Call means a
// finished before b started.
type stressOp struct {
	Client       int
	In           stressInput
	Out          stressOutput
	Call, Return int64
}

func (op stressOp) String() string {
	var in string
	switch op.In.Kind {
	case opClaim:
		in = fmt.Sprintf("claim(%s, %s)", op.In.Card, op.In.Marker)
	case opReclaim:
		in = fmt.Sprintf("reclaim(%s, prev %s@%d → %s)", op.In.Card, op.In.Token.Marker, op.In.Token.Epoch, op.In.Marker)
	default:
		in = fmt.Sprintf("%s(%s, %s@%d)", op.In.Kind, op.In.Card, op.In.Token.Marker, op.In.Token.Epoch)
	}
	var out string
	switch {
	case op.Out.OK && (op.In.Kind == opClaim || op.In.Kind == opReclaim):
		out = fmt.Sprintf("ok %s@%d", op.Out.Token.Marker, op.Out.Token.Epoch)
	case op.Out.OK:
		out = "ok"
	case op.Out.Named:
		out = fmt.Sprintf("conflict (held by %q@%d)", op.Out.Holder, op.Out.Epoch)
	default:
		out = "conflict"
	}
	return fmt.Sprintf("[%d..%d] w%d %s → %s", op.Call, op.Return, op.Client, in, out)
}

// StressFencing fights many workers over a few cards — claiming, writing as
// owner, renewing, releasing, expiring and transferring, often with tokens
// they no longer hold — records every operation with its outcome, and
// checks the history: epochs strictly increase per card across
// acquisitions, no superseded token's write is ever accepted, and at most
// one holder exists per card at any moment (the whole history must be
// linearizable against a one-holder-per-card model).
//
// On a local store the injected clock stands still, so a lease is expired
// exactly when ExpireClaimOwned ended it and nothing renewed it since, and
// the model demands a transfer of such a claim succeed. On a fleet store
// leases follow the server's clock, so the model only demands that a
// transfer, when it succeeds, took the claim it named.
func StressFencing(t *testing.T, h Harness, o StressOptions) {
	t.Helper()
	o = o.withDefaults()
	t.Logf("StressFencing: %d cards, %d workers, at most %d ops in %s, seed %d", o.Cards, o.Workers, o.Ops, o.Duration, o.Seed)
	e := open(t, h)
	cards := make([]string, o.Cards)
	for i := range cards {
		cards[i] = fmt.Sprintf("stress-%d", i)
		e.card(cards[i], board.StateReady)
	}

	var (
		clock    atomic.Int64 // the history's logical time
		mu       sync.Mutex
		history  []stressOp
		failures []string
	)
	// Each worker gets its own share of the budget: refused operations
	// write nothing and return at once, so with a shared budget the
	// refused workers would spend it all while the holders wait on their
	// durable writes, and the history would hold almost no fenced write.
	share := max(1, o.Ops/o.Workers)
	start := time.Now()
	deadline, hardDeadline := start.Add(o.Duration), start.Add(4*o.Duration)
	var fence fenceProgress
	more := func(n int) bool {
		now := time.Now()
		if n < share && now.Before(deadline) {
			return true
		}
		return !fence.exercised() && n < 4*share && now.Before(hardDeadline)
	}
	var wg sync.WaitGroup
	for w := range o.Workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(o.Seed, uint64(w)))
			worker := fmt.Sprintf("stress-w%d-%d", w, 1000+w)
			reaper := board.RecoveryMarker(fmt.Sprintf("stress-r%d-%d", w, 2000+w))
			ws := &stressWorker{rng: rng, worker: worker, reaper: reaper, held: map[string]board.ClaimToken{}, old: map[string][]board.ClaimToken{}}
			for n := 0; more(n); n++ {
				card := cards[rng.IntN(len(cards))]
				in, act := ws.pick(e, card)
				call := clock.Add(1)
				out, err := act()
				ret := clock.Add(1)
				if err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s: unexpected error %v", stressOp{Client: w, In: in}, err))
					mu.Unlock()
					continue
				}
				mu.Lock()
				history = append(history, stressOp{Client: w, In: in, Out: out, Call: call, Return: ret})
				mu.Unlock()
				fence.record(in.Kind, out.OK)
				ws.observe(card, in, out)
			}
		})
	}
	wg.Wait()
	for _, f := range failures {
		t.Errorf("StressFencing: %s", f)
	}
	if len(failures) > 0 {
		t.Fatalf("StressFencing: %d operations failed with errors other than a claim conflict; the history is not checked", len(failures))
	}
	summary, exercised := summarize(history)
	t.Logf("StressFencing: checking %d operations: %s", len(history), summary)
	if len(history) >= 200 && !exercised {
		// A history with no transfer or no refused stale write proves
		// nothing about fencing; fail rather than pass vacuously.
		t.Errorf("StressFencing: the history never exercised the fence (%s); raise StressOptions.Ops", summary)
	}
	for _, v := range checkStressHistory(history, !h.Fleet, time.Minute) {
		t.Error(v)
	}
}

// fenceProgress tracks, while the run goes on, whether the history already
// holds what summarize demands of an exercised fence.
type fenceProgress struct {
	claimed, reclaimed, written, refused atomic.Bool
}

func (f *fenceProgress) record(k opKind, ok bool) {
	switch {
	case k == opClaim && ok:
		f.claimed.Store(true)
	case k == opReclaim && ok:
		f.reclaimed.Store(true)
	case k == opWrite && ok:
		f.written.Store(true)
	case k == opWrite:
		f.refused.Store(true)
	}
}

func (f *fenceProgress) exercised() bool {
	return f.claimed.Load() && f.reclaimed.Load() && f.written.Load() && f.refused.Load()
}

// summarize counts outcomes per kind, and reports whether the history
// holds at least one granted claim, one transfer, one accepted owner write
// and one refused owner write.
func summarize(history []stressOp) (string, bool) {
	var ok, refused [opReclaim + 1]int
	for _, op := range history {
		if op.Out.OK {
			ok[op.In.Kind]++
		} else {
			refused[op.In.Kind]++
		}
	}
	var parts []string
	for k := opClaim; k <= opReclaim; k++ {
		parts = append(parts, fmt.Sprintf("%s %d ok/%d refused", k, ok[k], refused[k]))
	}
	return strings.Join(parts, ", "), ok[opClaim] > 0 && ok[opReclaim] > 0 && ok[opWrite] > 0 && refused[opWrite] > 0
}

// stressWorker is one worker's view: the claims it believes it holds and
// the tokens it held before, which it keeps presenting now and then like a
// worker that missed its claim_lost notice.
type stressWorker struct {
	rng            *rand.Rand
	worker, reaper string
	held           map[string]board.ClaimToken
	old            map[string][]board.ClaimToken
}

// observe updates the worker's view after an operation, as a real worker
// would: a grant is a holding, a release or a refusal of the held token
// ends it.
func (w *stressWorker) observe(card string, in stressInput, out stressOutput) {
	cur, holding := w.held[card]
	switch {
	case out.OK && (in.Kind == opClaim || in.Kind == opReclaim):
		if holding && cur != out.Token {
			w.old[card] = append(w.old[card], cur)
		}
		w.held[card] = out.Token
	case holding && in.Token == cur && (out.Conflict || (out.OK && in.Kind == opRelease)):
		w.old[card] = append(w.old[card], cur)
		delete(w.held, card)
	}
}

// staleToken is a token the worker does not (knowingly) hold: one it held
// before, or a fabricated one under its own marker.
func (w *stressWorker) staleToken(card string) board.ClaimToken {
	if old := w.old[card]; len(old) > 0 && w.rng.IntN(3) > 0 {
		return old[w.rng.IntN(len(old))]
	}
	return board.ClaimToken{Marker: w.worker, Epoch: int64(1 + w.rng.IntN(12))}
}

// pick chooses one operation and returns its input and a function
// performing it. A holder mostly writes, renews, expires and releases; a
// non-holder mostly claims and transfers, and sometimes writes with a stale
// token the fence must refuse.
func (w *stressWorker) pick(e *env, card string) (stressInput, func() (stressOutput, error)) {
	tok, holding := w.held[card]
	r := w.rng.IntN(100)
	var kind opKind
	switch {
	case holding && r < 35:
		kind = opWrite
	case holding && r < 55:
		kind = opRenew
	case holding && r < 67:
		kind = opExpire
	case holding && r < 80:
		kind = opRelease
	case holding && r < 88:
		kind = opClaim // an idempotent re-claim
	case holding:
		tok, kind = w.staleToken(card), []opKind{opWrite, opRenew, opExpire, opRelease}[w.rng.IntN(4)]
	case r < 40:
		kind = opClaim
	case r < 70:
		kind = opReclaim
	default:
		tok, kind = w.staleToken(card), []opKind{opWrite, opRenew, opExpire, opRelease}[w.rng.IntN(4)]
	}
	ctx, s := e.ctx, e.s
	in := stressInput{Kind: kind, Card: card, Token: tok}
	switch kind {
	case opClaim:
		in.Token, in.Marker = board.ClaimToken{}, w.worker
		return in, func() (stressOutput, error) {
			claimed, err := s.Claim(ctx, board.ClaimParams{Card: card, Marker: w.worker, Lease: lease})
			got := claimed.Token()
			return stressResult(got, err)
		}
	case opWrite:
		verb, flag := w.rng.IntN(3), w.rng.IntN(2) == 0
		return in, func() (stressOutput, error) {
			var err error
			switch verb {
			case 0:
				to := board.StateReady
				if flag {
					to = board.StateInProgress
				}
				_, err = s.SetStateOwned(ctx, board.SetStateOwnedParams{Card: card, Token: tok, To: to})
			case 1:
				err = s.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: card, Token: tok, RunID: fmt.Sprintf("run-%s-%d", tok.Marker, tok.Epoch)})
			default:
				err = s.SetAwaitingInputOwned(ctx, board.SetAwaitingInputOwnedParams{Card: card, Token: tok, Awaiting: flag})
			}
			return stressResult(board.ClaimToken{}, err)
		}
	case opRenew:
		return in, func() (stressOutput, error) {
			res, err := s.RenewClaims(ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: card, Token: tok}}, Lease: lease})
			if err != nil {
				return stressOutput{}, fmt.Errorf("RenewClaims batch error: %w", err)
			}
			if len(res) != 1 || res[0].Card != card {
				return stressOutput{}, fmt.Errorf("RenewClaims returned %+v for one hold of %s", res, card)
			}
			return stressResult(board.ClaimToken{}, res[0].Err)
		}
	case opExpire:
		return in, func() (stressOutput, error) {
			return stressResult(board.ClaimToken{}, s.ExpireClaimOwned(ctx, board.OwnedParams{Card: card, Token: tok}))
		}
	case opRelease:
		return in, func() (stressOutput, error) {
			return stressResult(board.ClaimToken{}, s.ReleaseOwned(ctx, board.OwnedParams{Card: card, Token: tok}))
		}
	}
	// A reaper: read the card as a listing would, then transfer whatever
	// claim it saw. The read is not part of the history; the transfer's
	// precondition is what the model checks.
	c, err := s.GetCard(ctx, board.GetCardParams{ID: card})
	prev := c.Token()
	if err != nil || !c.Claimed() {
		prev = w.staleToken(card) // nothing to transfer: the CAS must refuse
	}
	in.Marker, in.Token = w.reaper, prev
	return in, func() (stressOutput, error) {
		if err != nil {
			return stressOutput{}, fmt.Errorf("GetCard: %w", err)
		}
		return reclaimOp(e, card, prev, w.reaper, c)
	}
}

func reclaimOp(e *env, card string, prev board.ClaimToken, reaper string, seen board.Card) (stressOutput, error) {
	// Local: the clock stands still, so cutoff = now is "expired iff
	// ExpireClaimOwned ended the lease". Fleet: the lease the read saw.
	cutoff := e.clock.Now()
	if e.h.Fleet {
		cutoff = seen.ClaimLeaseUntil
	}
	card2, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: card, Prev: prev, RecoveryMarker: reaper, Cutoff: cutoff, Lease: lease})
	got := card2.Token()
	return stressResult(got, err)
}

func stressResult(tok board.ClaimToken, err error) (stressOutput, error) {
	if err == nil {
		return stressOutput{OK: true, Token: tok}, nil
	}
	if !errors.Is(err, board.ErrClaimConflict) {
		return stressOutput{}, err
	}
	out := stressOutput{Conflict: true}
	if ce, ok := board.AsClaimConflict(err); ok {
		out.Named, out.Holder, out.Epoch = true, ce.Holder, ce.Epoch
	}
	return out, nil
}

// checkStressHistory returns every violation found in a history. strict is
// the local twin's sharper model: a still clock decides expiry exactly,
// conflicts name the holder of the linearization point, and the epoch is a
// counter. The timeout bounds the linearizability search per card; running
// out of it is reported as a failure, never as a pass.
func checkStressHistory(history []stressOp, strict bool, timeout time.Duration) []string {
	byCard := map[string][]stressOp{}
	for _, op := range history {
		byCard[op.In.Card] = append(byCard[op.In.Card], op)
	}
	cardIDs := make([]string, 0, len(byCard))
	for c := range byCard {
		cardIDs = append(cardIDs, c)
	}
	sort.Strings(cardIDs)
	var out []string
	for _, card := range cardIDs {
		ops := byCard[card]
		sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
		out = append(out, checkFences(card, ops)...)
		out = append(out, checkLinearizable(card, ops, strict, timeout)...)
	}
	return out
}

// checkFences is the direct check of the three fencing properties, which
// names the offending operations when one fails.
func checkFences(card string, ops []stressOp) []string {
	var out []string
	// first acquisition of each granted token
	type grant struct {
		tok board.ClaimToken
		op  stressOp
	}
	var grants []grant
	seen := map[board.ClaimToken]bool{}
	byEpoch := map[int64]board.ClaimToken{}
	for _, op := range ops {
		if !op.Out.OK || (op.In.Kind != opClaim && op.In.Kind != opReclaim) {
			continue
		}
		tok := op.Out.Token
		if other, ok := byEpoch[tok.Epoch]; ok && other != tok {
			out = append(out, fmt.Sprintf("card %s: epoch %d granted to two holders, %q and %q (second by %s)", card, tok.Epoch, other.Marker, tok.Marker, op))
		}
		byEpoch[tok.Epoch] = tok
		if op.In.Kind == opReclaim && tok.Epoch <= op.In.Token.Epoch {
			out = append(out, fmt.Sprintf("card %s: transfer did not raise the epoch: %s", card, op))
		}
		if !seen[tok] {
			seen[tok] = true
			grants = append(grants, grant{tok, op})
		}
	}
	// Epochs strictly increase across acquisitions in real-time order.
	for i, a := range grants {
		for _, b := range grants[i+1:] {
			if a.op.Return < b.op.Call && a.tok.Epoch >= b.tok.Epoch {
				out = append(out, fmt.Sprintf("card %s: epoch went from %d to %d: %s, later %s", card, a.tok.Epoch, b.tok.Epoch, a.op, b.op))
			}
			if b.op.Return < a.op.Call && b.tok.Epoch >= a.tok.Epoch {
				out = append(out, fmt.Sprintf("card %s: epoch went from %d to %d: %s, later %s", card, b.tok.Epoch, a.tok.Epoch, b.op, a.op))
			}
		}
	}
	// No accepted owner write presents a token already superseded when the
	// write started.
	for _, op := range ops {
		if !op.Out.OK {
			continue
		}
		switch op.In.Kind {
		case opWrite, opRenew, opExpire:
		default:
			continue
		}
		for _, g := range grants {
			if g.tok.Epoch > op.In.Token.Epoch && g.op.Return < op.Call {
				out = append(out, fmt.Sprintf("card %s: write with superseded token %s@%d accepted: %s, after %s", card, op.In.Token.Marker, op.In.Token.Epoch, op, g.op))
				break
			}
		}
	}
	// Past a handful, more reports of the same card say nothing new.
	if len(out) > maxFenceReports {
		out = append(out[:maxFenceReports], fmt.Sprintf("card %s: %d more fencing violations not shown", card, len(out)-maxFenceReports))
	}
	return out
}

const maxFenceReports = 8

// holderState is the per-card model state: who holds the card at which
// epoch, and (strict model only) whether the lease was ended.
type holderState struct {
	Holder  string
	Epoch   int64
	Expired bool
}

// stressModel is the one-holder-per-card sequential specification.
func stressModel(strict bool) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return holderState{} },
		Step: func(st, inp, outp any) (bool, any) {
			s, in, out := st.(holderState), inp.(stressInput), outp.(stressOutput)
			refused := func() bool {
				// A refusal never changes the card. The local twin names the
				// holder it compared against; the fleet twin may read the
				// holder after its CAS failed, so its naming is not checked.
				return out.Conflict && (!strict || !out.Named || (out.Holder == s.Holder && out.Epoch == s.Epoch))
			}
			owns := s.Holder != "" && s.Holder == in.Token.Marker && s.Epoch == in.Token.Epoch
			raised := func() bool {
				if strict {
					return out.Token.Epoch == s.Epoch+1
				}
				return out.Token.Epoch > s.Epoch
			}
			switch in.Kind {
			case opClaim:
				switch s.Holder {
				case "":
					if out.OK && out.Token.Marker == in.Marker && raised() {
						return true, holderState{Holder: in.Marker, Epoch: out.Token.Epoch}
					}
					return false, s
				case in.Marker:
					// Idempotent re-claim: same token, lease refreshed.
					if out.OK && out.Token == (board.ClaimToken{Marker: s.Holder, Epoch: s.Epoch}) {
						return true, holderState{Holder: s.Holder, Epoch: s.Epoch}
					}
					return false, s
				default:
					return refused(), s
				}
			case opWrite, opRenew, opExpire:
				if !owns {
					return refused(), s
				}
				if !out.OK {
					return false, s
				}
				switch in.Kind {
				case opRenew:
					s.Expired = false
				case opExpire:
					s.Expired = true
				}
				return true, s
			case opRelease:
				if s.Holder == "" {
					return out.OK, s // releasing a free card is nil
				}
				if !owns {
					return refused(), s
				}
				return out.OK, holderState{Epoch: s.Epoch}
			case opReclaim:
				transferable := owns && (s.Expired || !strict)
				if out.OK {
					if transferable && out.Token.Marker == in.Marker && raised() {
						return true, holderState{Holder: in.Marker, Epoch: out.Token.Epoch}
					}
					return false, s
				}
				if strict && owns && s.Expired {
					return false, s // an expired claim named exactly must transfer
				}
				return refused(), s
			}
			return false, s
		},
		DescribeOperation: func(inp, outp any) string {
			return stressOp{In: inp.(stressInput), Out: outp.(stressOutput)}.String()
		},
		DescribeState: func(st any) string {
			s := st.(holderState)
			return fmt.Sprintf("%q@%d expired=%v", s.Holder, s.Epoch, s.Expired)
		},
	}
}

// checkLinearizable checks one card's history against the model.
func checkLinearizable(card string, ops []stressOp, strict bool, timeout time.Duration) []string {
	hist := make([]porcupine.Operation, len(ops))
	for i, op := range ops {
		hist[i] = porcupine.Operation{ClientId: op.Client, Input: op.In, Output: op.Out, Call: op.Call, Return: op.Return}
	}
	res, info := porcupine.CheckOperationsVerbose(stressModel(strict), hist, timeout)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return []string{fmt.Sprintf("card %s: the linearizability check of %d operations did not finish within %s (shrink StressOptions)", card, len(ops), timeout)}
	}
	// Report the longest prefix that could be linearized and the
	// operations that could not follow it.
	var b strings.Builder
	fmt.Fprintf(&b, "card %s: history of %d operations is not linearizable against one holder per card", card, len(ops))
	var best []int
	for _, partial := range info.PartialLinearizations() {
		for _, p := range partial {
			if len(p) > len(best) {
				best = p
			}
		}
	}
	if len(best) > 0 {
		from := max(0, len(best)-8)
		fmt.Fprintf(&b, "\n  longest linearizable prefix ends with:")
		for _, i := range best[from:] {
			fmt.Fprintf(&b, "\n    %s", ops[i])
		}
	}
	in := map[int]bool{}
	for _, i := range best {
		in[i] = true
	}
	n := 0
	fmt.Fprintf(&b, "\n  first operations that cannot follow it:")
	for i, op := range ops {
		if !in[i] && n < 6 {
			fmt.Fprintf(&b, "\n    %s", op)
			n++
		}
	}
	return []string{b.String()}
}
