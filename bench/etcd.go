package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// etcdPeer is a single-member embedded etcd on loopback with a durable
// (fsynced) WAL: what a user would run instead of leasekeeper to hold
// leases on work items.
type etcdPeer struct {
	e  *embed.Etcd
	cl *clientv3.Client
}

func freeLoopbackURL() (url.URL, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	addr := ln.Addr().String()
	ln.Close()
	return url.URL{Scheme: "http", Host: addr}, nil
}

func startEtcd(ctx context.Context, dir string) (*etcdPeer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "bench"
	cfg.Dir = filepath.Join(dir, "data")
	cfg.LogLevel = "error"
	// Its own log goes to a file in its data dir: on shutdown it logs the
	// closing of its listeners as errors, which are not the benchmark's.
	cfg.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	cu, err := freeLoopbackURL()
	if err != nil {
		return nil, err
	}
	pu, err := freeLoopbackURL()
	if err != nil {
		return nil, err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd not ready after 30s")
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{cu.String()}, DialTimeout: 5 * time.Second})
	if err != nil {
		e.Close()
		return nil, err
	}
	return &etcdPeer{e: e, cl: cl}, nil
}

func (p *etcdPeer) stop() {
	p.cl.Close()
	p.e.Close()
}
