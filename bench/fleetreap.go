package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/watchdog"
)

// The fleet's reapers side by side (DESIGN.md#reaper-shares): each agent
// its own store and watchdog.Reaper on one database, as a user's peers run
// them, counted on the wire like the verbs.

// reapRows are the rows of one fleet of reapers.
type reapRows struct {
	commands, examined, perCard, lost, perDecided *row
}

// reapFleet is what one fleet of agents' reapers did in one repeat.
type reapFleet struct {
	agents, expired int
	// passes is what every agent's pass over the expired claims sent;
	// idle is what every agent's pass over nothing sent.
	passes, idle tally
	// examined counts the pass results' cards (a card two reapers listed
	// counts twice), lost the transfers another reaper won, decided the
	// cards a pass acted on.
	examined, lost, decided int
	// outcomes counts the passes' outcome/action pairs.
	outcomes map[string]int
}

// record adds f's figures to its rows.
func (r reapRows) record(f reapFleet) {
	per := float64(f.agents) // one pass each
	r.commands.vals = append(r.commands.vals, float64(f.passes.commands)/per)
	r.commands.note = "in all: " + f.passes.breakdown()
	r.examined.vals = append(r.examined.vals, float64(f.examined)/per)
	r.perCard.vals = append(r.perCard.vals, float64(f.examined)/float64(f.expired))
	r.lost.vals = append(r.lost.vals, float64(f.lost))
	r.perDecided.vals = append(r.perDecided.vals, float64(f.passes.commands)/float64(f.decided))
}

// fleetReapers opens agents stores on db, each with its own client and
// its own fleet reaper (gate on, the defaults otherwise), and has each
// reaper pass once over nothing (which records it among the live
// reapers), then once more over nothing (counted: the idle pass), then,
// once expired claims of a dead worker on another host lie on the board,
// once more, all agents at once (counted).
func fleetReapers(ctx context.Context, uri, db string, agents, expired int) (reapFleet, error) {
	out := reapFleet{agents: agents, expired: expired, outcomes: map[string]int{}}
	stores := make([]*countedStore, agents)
	defer func() {
		for _, s := range stores {
			if s != nil {
				s.st.Close()
			}
		}
	}()
	reapers := make([]*watchdog.Reaper, agents)
	for a := range stores {
		s, err := openCounted(ctx, uri, db)
		if err != nil {
			return out, err
		}
		stores[a] = s
		// The agent's reaper reads the board from the agent's cache of it,
		// re-read once per TTL however many passes it serves: here read
		// once, uncounted.
		def, err := s.st.LoadBoard(ctx)
		if err != nil {
			return out, err
		}
		reapers[a], err = watchdog.New(watchdog.Config{
			Store:   s.st,
			Board:   func(context.Context) (board.Board, error) { return def, nil },
			Marker:  board.AgentMarker(fmt.Sprintf("agent%02d", a), 5000+a),
			Fleet:   true,
			Lease:   func() time.Duration { return benchLease },
			Enabled: func() bool { return true },
		})
		if err != nil {
			return out, err
		}
	}
	pass := func(a int) (tally, watchdog.PassResult, error) {
		var res watchdog.PassResult
		t, err := stores[a].count(ctx, func() (err error) {
			res, err = reapers[a].RunOnce(ctx, false)
			return err
		})
		return t, res, err
	}
	for a := range reapers {
		if _, _, err := pass(a); err != nil {
			return out, fmt.Errorf("agent %d's first pass: %w", a, err)
		}
	}
	for a := range reapers {
		t, res, err := pass(a)
		if err != nil {
			return out, fmt.Errorf("agent %d's idle pass: %w", a, err)
		}
		if len(res.Cards) != 0 {
			return out, fmt.Errorf("agent %d's idle pass examined %d cards", a, len(res.Cards))
		}
		out.idle.add(t)
	}

	// The dead worker's claims, of reaperMix's population (section 3).
	st := stores[0].st
	dead := board.WorkerMarker("elsewhere", 4242)
	ids := make([]string, expired)
	for i := range ids {
		ids[i] = fmt.Sprintf("dead-%03d", i)
		if _, err := st.CreateCard(ctx, board.CreateCardParams{ID: ids[i], State: board.StateInProgress}); err != nil {
			return out, err
		}
		held, err := st.Claim(ctx, board.ClaimParams{Card: ids[i], Marker: dead, Lease: benchLease})
		tok := held.Token()
		if err != nil {
			return out, fmt.Errorf("claim %s: %w", ids[i], err)
		}
		status := reaperMix[i%len(reaperMix)]
		if status == "" {
			continue
		}
		run := board.Run{ID: ids[i] + "-run", Card: ids[i], Status: status, Owner: dead, Epoch: tok.Epoch, Host: "elsewhere", PID: 4242}
		if status == board.RunRunning {
			run.Checkpoint = "step-3"
		}
		if _, err := st.CreateRun(ctx, board.CreateRunParams{Token: tok, Run: run}); err != nil {
			return out, fmt.Errorf("run of %s: %w", ids[i], err)
		}
		if err := st.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: ids[i], Token: tok, RunID: run.ID}); err != nil {
			return out, fmt.Errorf("last run of %s: %w", ids[i], err)
		}
	}
	if err := expireAndAge(ctx, uri, db, ids); err != nil {
		return out, err
	}

	// One pass each, all at once.
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		go_   = make(chan struct{})
	)
	for a := range reapers {
		wg.Go(func() {
			<-go_
			t, res, err := pass(a)
			mu.Lock()
			defer mu.Unlock()
			out.passes.add(t)
			if err != nil && first == nil {
				first = fmt.Errorf("agent %d's pass: %w", a, err)
			}
			for _, cr := range res.Cards {
				out.examined++
				out.outcomes[string(cr.Outcome)+"/"+string(cr.Decision.Action)]++
				switch {
				case cr.Err != nil:
					if first == nil {
						first = fmt.Errorf("agent %d, card %s: %w", a, cr.Card, cr.Err)
					}
				case cr.Outcome == watchdog.OutcomeSkippedConflict:
					out.lost++
				default:
					out.decided++
				}
			}
		})
	}
	close(go_)
	wg.Wait()
	if first != nil {
		return out, first
	}
	if out.decided != expired {
		return out, fmt.Errorf("%d agents' passes decided %d of the %d expired cards", agents, out.decided, expired)
	}
	return out, nil
}

// expireAndAge stands in for time passing on the server, by a write of
// its own (the twin has no verb that ages a claim): the claims of ids
// ended their lease a minute ago and began ten minutes ago, past the stamp
// window of two leases and the orphan grace.
func expireAndAge(ctx context.Context, uri, db string, ids []string) error {
	c, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return err
	}
	defer c.Disconnect(context.WithoutCancel(ctx))
	raw := c.Database(db)
	var hello bson.Raw
	if hello, err = raw.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw(); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	ms, ok := hello.Lookup("localTime").DateTimeOK()
	if !ok {
		return fmt.Errorf("the hello reply has no localTime")
	}
	now := time.UnixMilli(ms).UTC()
	res, err := raw.Collection("cards").UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "claim_lease_until", Value: now.Add(-time.Minute)},
			{Key: "claimed_at", Value: now.Add(-10 * time.Minute)},
		}}})
	if err != nil {
		return fmt.Errorf("expire the dead worker's claims: %w", err)
	}
	if res.MatchedCount != int64(len(ids)) {
		return fmt.Errorf("expire the dead worker's claims: %d of %d matched", res.MatchedCount, len(ids))
	}
	return nil
}
