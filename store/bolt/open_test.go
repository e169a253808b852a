package boltstore

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// holdLockEnv makes the test binary a lock holder: TestMain opens the store
// named by it, prints "locked", and keeps it open until stdin closes.
const holdLockEnv = "BOLTSTORE_TEST_HOLD_LOCK"

func TestMain(m *testing.M) {
	if path := os.Getenv(holdLockEnv); path != "" {
		os.Exit(holdLock(path))
	}
	if path := os.Getenv(crashWriterEnv); path != "" {
		os.Exit(crashWriter(path))
	}
	agentproc.MemoryTempDir()
	os.Exit(m.Run())
}

// selfAs runs this test binary in one of the roles TestMain knows (env
// names the role, path the board file), with no test of its own.
func selfAs(env, path string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+path)
	cmd.Stderr = os.Stderr
	return cmd
}

func holdLock(path string) int {
	s, err := Open(path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func TestOpenLockTimeoutNamesHolderInSameProcess(t *testing.T) {
	s, _, path := openTest(t)
	_ = s
	start := time.Now()
	_, err := Open(path, Options{LockTimeout: 200 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open error = %v, want ErrLocked", err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("second Open waited %s, want about the 200ms lock timeout", waited)
	}
	for _, want := range []string{path, "pid " + strconv.Itoa(os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestOpenLockTimeoutNamesHolderInOtherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "board.db")
	cmd := selfAs(holdLockEnv, path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("holder said %q, %v; want \"locked\"", line, err)
	}

	// Asked without waiting, the file is locked, by that pid.
	if locked, pids := LockedBy(path); !locked || !slices.Contains(pids, cmd.Process.Pid) {
		t.Errorf("LockedBy while another process holds the file = %v %v, want true naming pid %d", locked, pids, cmd.Process.Pid)
	}
	_, err = Open(path, Options{LockTimeout: 200 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Open while another process holds the file: %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), "store.path") {
		t.Errorf("error %q does not say what to do", err)
	}
	if want := "pid " + strconv.Itoa(cmd.Process.Pid); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the holder %q", err, want)
	}

	// Once the holder closes the store the file opens again.
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("holder exited: %v", err)
	}
	if locked, pids := LockedBy(path); locked {
		t.Errorf("LockedBy after the holder exited = true %v", pids)
	}
	s, err := Open(path, Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatalf("Open after the holder exited: %v", err)
	}
	_ = s.Close()
	if locked, _ := LockedBy(filepath.Join(t.TempDir(), "missing.db")); locked {
		t.Error("LockedBy of a missing file = true")
	}
}

func setSchema(t *testing.T, path string, v string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, []byte(v)) })
	if err != nil {
		t.Fatal(err)
	}
}

func rawDump(t *testing.T, path string) string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	return dump(t, &Store{db: db})
}

func TestOpenRefusesNewerSchemaAndKeepsTheFile(t *testing.T) {
	s, _, path := openTest(t)
	mustCreate(t, s, board.CreateCardParams{ID: "a"})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	setSchema(t, path, strconv.Itoa(SchemaVersion+1))
	before := rawDump(t, path)

	_, err := Open(path, Options{})
	if !errors.Is(err, ErrSchema) {
		t.Fatalf("Open of a newer-schema file: %v, want ErrSchema", err)
	}
	for _, want := range []string{path, "newer", strconv.Itoa(SchemaVersion + 1)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if after := rawDump(t, path); after != before {
		t.Errorf("refused open changed the file:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestOpenRefusesFilesItDidNotWrite(t *testing.T) {
	tests := []struct {
		name  string
		setup func(tx *bolt.Tx) error
	}{
		{"data without a schema stamp", func(tx *bolt.Tx) error {
			b, err := tx.CreateBucket([]byte("somebody_else"))
			if err != nil {
				return err
			}
			return b.Put([]byte("k"), []byte("v"))
		}},
		{"unreadable stamp", func(tx *bolt.Tx) error {
			b, err := tx.CreateBucket(bucketMeta)
			if err != nil {
				return err
			}
			return b.Put(keySchema, []byte("one"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "foreign.db")
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(tt.setup); err != nil {
				t.Fatal(err)
			}
			_ = db.Close()
			before := rawDump(t, path)
			if _, err := Open(path, Options{}); !errors.Is(err, ErrSchema) {
				t.Fatalf("Open: %v, want ErrSchema", err)
			}
			if after := rawDump(t, path); after != before {
				t.Errorf("refused open changed the file:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

func TestOpenValidatesBoardAndStampsNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "board.db")
	bad := board.Board{States: []board.State{{Name: "only"}}}
	if _, err := Open(path, Options{Board: bad}); !errors.Is(err, board.ErrInvalidArgument) {
		t.Fatalf("Open with an invalid board: %v, want ErrInvalidArgument", err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.LoadBoard(t.Context()); err != nil || got.String() != board.DefaultBoard(true).String() {
		t.Errorf("LoadBoard() = %s, %v; want %s", got, err, board.DefaultBoard(true))
	}
	_ = s.Close()
	if !strings.Contains(rawDump(t, path), fmt.Sprintf("%q=%q", keySchema, strconv.Itoa(SchemaVersion))) {
		t.Errorf("new file is not stamped with schema version %d", SchemaVersion)
	}
}

func TestStateSurvivesCloseAndReopen(t *testing.T) {
	ctx := t.Context()
	clock := newFakeClock()
	path := filepath.Join(t.TempDir(), "board.db")
	s, err := Open(path, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, board.CreateCardParams{ID: "a", Title: "first", Labels: []string{"x"}})
	mustCreate(t, s, board.CreateCardParams{ID: "b", DependsOn: []string{"a"}})
	tok := mustClaim(t, s, "a", "host-100")
	if err := s.ReleaseOwned(ctx, board.OwnedParams{Card: "a", Token: tok}); err != nil {
		t.Fatal(err)
	}
	tok = mustClaim(t, s, "a", "host-101")
	if got, want := tok.Epoch, int64(2); got != want {
		t.Fatalf("second claim epoch = %d, want %d", got, want)
	}
	before, err := s.GetCard(ctx, board.GetCardParams{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	evBefore, err := s.Events(ctx, board.EventsParams{After: 0, Limit: 0})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetCard(ctx, board.GetCardParams{ID: "a"}); !errors.Is(err, ErrClosed) {
		t.Errorf("GetCard after Close: %v, want ErrClosed", err)
	}
	if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "c"}); !errors.Is(err, ErrClosed) {
		t.Errorf("CreateCard after Close: %v, want ErrClosed", err)
	}

	s, err = Open(path, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after, err := s.GetCard(ctx, board.GetCardParams{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%+v", after) != fmt.Sprintf("%+v", before) {
		t.Errorf("card after reopen:\n%+v\nwant\n%+v", after, before)
	}
	evAfter, err := s.Events(ctx, board.EventsParams{After: 0, Limit: 0})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(evAfter) != fmt.Sprint(evBefore) {
		t.Errorf("events after reopen:\n%v\nwant\n%v", evAfter, evBefore)
	}
	// The fence continues from the stored epoch: release and re-claim.
	if err := s.ReleaseOwned(ctx, board.OwnedParams{Card: "a", Token: tok}); err != nil {
		t.Fatal(err)
	}
	if got, want := mustClaim(t, s, "a", "host-100").Epoch, int64(3); got != want {
		t.Errorf("claim after reopen: epoch %d, want %d", got, want)
	}
	ev, err := s.Events(ctx, board.EventsParams{After: evBefore[len(evBefore)-1].Seq, Limit: 0})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != 2 || ev[0].Seq != evBefore[len(evBefore)-1].Seq+1 || ev[1].Seq != ev[0].Seq+1 {
		t.Errorf("events after reopen continue the sequence: got %+v", ev)
	}
	checkIndexes(t, s)
}
