package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// etcdRun is the run record the etcd lifecycle keeps, the fields a run
// needs to be told apart and judged: whose it is, under which claim, how
// it ended.
type etcdRun struct {
	ID        string    `json:"id"`
	Card      string    `json:"card"`
	Status    string    `json:"status"`
	Owner     string    `json:"owner"`
	Epoch     int64     `json:"epoch"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
}

func etcdMarker(w int) string { return "benchhost:" + strconv.Itoa(1000+w) }

// setupEtcdLifecycle is the card lifecycle on etcd written as a careful
// user would: one session (lease) per worker; one txn to start — the card
// is in the pool and nobody holds it (compare), the claim key is put with
// the session's lease, the state and the run are put; one txn to finish —
// fenced on the claim key's create revision (the claim's epoch), the
// run's verdict, the card's filing and the claim key's deletion. Cards
// are put in the pool beforehand (untimed), as leasekeeper's are created.
func setupEtcdLifecycle(ctx context.Context, dir string, workers int) (*lifeVariant, error) {
	p, err := startEtcd(ctx, dir)
	if err != nil {
		return nil, err
	}
	sessions := make([]*concurrency.Session, workers)
	for w := range sessions {
		s, err := concurrency.NewSession(p.cl, concurrency.WithTTL(int(benchLease/time.Second)))
		if err != nil {
			p.stop()
			return nil, err
		}
		sessions[w] = s
	}
	stateKey := func(id string) string { return "/lk/cards/" + id + "/state" }
	claimKey := func(id string) string { return "/lk/claims/" + id }
	runKey := func(id string) string { return "/lk/runs/" + id + "/1" }
	prepare := func(ctx context.Context, from, n int) error {
		return prepareParallel(ctx, from, n, func(ctx context.Context, i int) error {
			_, err := p.cl.Put(ctx, stateKey(lifeCardID(i)), "ready")
			return err
		})
	}
	life := func(ctx context.Context, w, i int) error {
		id, marker := lifeCardID(i), etcdMarker(w)
		run := etcdRun{ID: id + "-1", Card: id, Status: "running", Owner: marker, StartedAt: time.Now()}
		v, err := json.Marshal(run)
		if err != nil {
			return err
		}
		resp, err := p.cl.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(claimKey(id)), "=", 0),
				clientv3.Compare(clientv3.Value(stateKey(id)), "=", "ready")).
			Then(clientv3.OpPut(claimKey(id), marker, clientv3.WithLease(sessions[w].Lease())),
				clientv3.OpPut(stateKey(id), "in_progress"),
				clientv3.OpPut(runKey(id), string(v))).
			Commit()
		if err != nil {
			return fmt.Errorf("start txn: %w", err)
		}
		if !resp.Succeeded {
			return errors.New("etcd: card held or not in the pool")
		}
		// The claim key's create revision is the claim's fence: a later
		// holder's key has a newer one.
		epoch := resp.Header.Revision
		run.Epoch, run.Status, run.EndedAt = epoch, "finished", time.Now()
		if v, err = json.Marshal(run); err != nil {
			return err
		}
		resp, err = p.cl.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(claimKey(id)), "=", epoch)).
			Then(clientv3.OpPut(runKey(id), string(v)),
				clientv3.OpPut(stateKey(id), "done"),
				clientv3.OpDelete(claimKey(id))).
			Commit()
		if err != nil {
			return fmt.Errorf("finish txn: %w", err)
		}
		if !resp.Succeeded {
			return errors.New("etcd: claim lost before finish")
		}
		return nil
	}
	stop := func() {
		for _, s := range sessions {
			s.Close()
		}
		p.stop()
	}
	return &lifeVariant{prepare: prepare, life: life, stop: stop}, nil
}
