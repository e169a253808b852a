package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgServer is a throwaway PostgreSQL server for the River comparison: a
// fresh cluster in a temporary directory, listening only on a Unix socket
// there, with PostgreSQL's durable defaults (fsync on, synchronous
// commit). It runs as the postgres user, because initdb and postgres
// refuse to run as root.
type pgServer struct {
	bin     string // the server's bin directory
	version string
	dir     string
	cmd     *exec.Cmd
	exited  chan struct{}
	n       atomic.Int64
}

// findPostgres returns the bin directory of the newest PostgreSQL server
// installed the Debian way, or "" when there is none.
func findPostgres() string {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(bins) == 0 {
		return ""
	}
	slices.SortFunc(bins, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(a))))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(b))))
		return va - vb
	})
	return filepath.Dir(bins[len(bins)-1])
}

func startPostgres(ctx context.Context, bin string) (*pgServer, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// Its own directory under the system temp dir: the benchmark's is
	// private to root, and the server runs as postgres.
	dir, err := os.MkdirTemp("", "lkbench-pg")
	if err != nil {
		return nil, err
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	as := func(cmd *exec.Cmd) *exec.Cmd {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
		return cmd
	}
	data := filepath.Join(dir, "data")
	if out, err := as(exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8")).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := as(exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", dir, "-p", "5432",
		"-c", "listen_addresses=", "-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "max_connections=200"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	log.Close()
	s := &pgServer{bin: bin, version: filepath.Base(filepath.Dir(bin)), dir: dir, cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := pgx.Connect(ctx, s.dsn("postgres"))
		if err == nil {
			c.Close(ctx)
			return s, nil
		}
		select {
		case <-s.exited:
			b, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("postgres exited: %s", b)
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("postgres not accepting connections after 30s: %w", err)
		}
	}
}

func (s *pgServer) dsn(db string) string {
	return fmt.Sprintf("host=%s port=5432 user=postgres dbname=%s sslmode=disable", s.dir, db)
}

func (s *pgServer) newDBName() string { return "bench" + strconv.FormatInt(s.n.Add(1), 10) }

func (s *pgServer) createDB(ctx context.Context, name string) error {
	c, err := pgx.Connect(ctx, s.dsn("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

// stop shuts the server down (fast shutdown: SIGINT) and removes its
// directory.
func (s *pgServer) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	if err := os.RemoveAll(s.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(os.Stderr, "bench: removing the PostgreSQL directory:", err)
	}
}
