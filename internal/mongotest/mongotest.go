// Package mongotest gives tests a real MongoDB-wire server.
//
// By default it builds and starts the ferretserver program (an embedded
// FerretDB behind a wire proxy that serializes each database's requests,
// kept in its own Go module under ferretserver/) once per test binary, on
// a free loopback port. When
// LEASEKEEPER_TEST_MONGO_URI is set, that MongoDB is used instead and
// nothing is built, so the same suites certify the twin against the real
// server wherever one exists.
//
// The server's FerretDB is patched to narrow a filter naming _id by its
// _id, to find an _id through its index rather than by a scan, and to
// skip without decoding the documents that do not spell the strings a
// filter asks for (see pushdown.go): the answers are the same, the fleet
// tests run in a fraction of the time.
//
// The server binary is built WITHOUT the race detector even when the tests
// run with -race: FerretDB takes minutes to compile and runs slowly under
// it, and the race detector is there for leasekeeper's code, which still
// runs instrumented in the test process. The binary is cached under the
// user cache directory keyed by a hash of its sources and the Go version,
// so only the first run pays for the build.
//
// FERRETSERVER_CPUPROFILE=FILE in a test's environment has the server
// write a CPU profile of its whole run to FILE: where the MongoDB time of
// a slow test goes.
//
// ClockProxy puts a wire proxy in front of the server that rewrites the
// server's clock (hello.localTime, the only time the MongoDB twin reads
// from the server) to a clock the test controls.
//
// Typical use:
//
//	func TestMain(m *testing.M) { os.Exit(mongotest.Main(m)) }
//
//	func TestX(t *testing.T) {
//		uri, db := mongotest.URI(t), mongotest.Database(t)
//		...
//	}
package mongotest

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/leasekeeper/leasekeeper/internal/agentproc"
	"github.com/leasekeeper/leasekeeper/internal/filelock"
)

// EnvURI names the environment variable that points the tests at a real
// MongoDB instead of the bundled FerretDB server.
const EnvURI = "LEASEKEEPER_TEST_MONGO_URI"

// startTimeout bounds the wait for the server's LISTEN line. The build is
// not included: it has its own, longer budget (a cold FerretDB build takes
// over a minute on a two-core machine).
const startTimeout = 60 * time.Second

var (
	once    sync.Once
	srv     *server
	srvErr  error
	dbCount atomic.Int64
)

// server is the running ferretserver child.
type server struct {
	uri   string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
}

// Main runs the package's tests and then stops the server if one was
// started. Call it from TestMain: os.Exit(mongotest.Main(m)). Using it is
// not required for cleanup — the server exits when the test process does,
// because its stdin closes — but it stops the server deterministically.
// It also keeps the test binary's scratch files, and the server's data, in
// memory where it can (agentproc.MemoryTempDir).
func Main(m *testing.M) int {
	agentproc.MemoryTempDir()
	code := m.Run()
	Stop()
	return code
}

// Stop stops the server started by this process, if any.
func Stop() {
	if srv == nil {
		return
	}
	_ = srv.stdin.Close()
	select {
	case <-srv.done:
	case <-time.After(10 * time.Second):
		_ = srv.cmd.Process.Kill()
		<-srv.done
	}
}

// URI returns the connection string of the test server, starting it on
// first use. It fails the test when the server cannot be started.
func URI(t testing.TB) string {
	t.Helper()
	uri, err := ensure()
	if err != nil {
		t.Fatalf("mongotest: %v", err)
	}
	return uri
}

// Database returns a database name that no other test of any test binary
// uses, and drops the database when the test ends.
func Database(t testing.TB) string {
	t.Helper()
	uri := URI(t)
	name := databaseName(t.Name())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := mongo.Connect(options.Client().ApplyURI(uri))
		if err != nil {
			t.Logf("mongotest: drop %s: %v", name, err)
			return
		}
		defer c.Disconnect(ctx)
		if err := c.Database(name).Drop(ctx); err != nil {
			t.Logf("mongotest: drop %s: %v", name, err)
		}
	})
	return name
}

// Client returns a raw driver client connected to the test server and
// disconnected when the test ends. Tests use it to act as a foreign writer
// (another binary's write that strips fields, a corrupt document).
func Client(t testing.TB) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(URI(t)))
	if err != nil {
		t.Fatalf("mongotest: connect: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
	})
	return c
}

// databaseName builds a short name that is valid on MongoDB and FerretDB
// (letters, digits, underscore; at most 63 bytes) and unique: the process id
// separates test binaries sharing a real server, a counter separates tests.
func databaseName(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	slug := b.String()
	if len(slug) > 32 {
		slug = slug[len(slug)-32:]
	}
	return fmt.Sprintf("lk%d_%d_%s", os.Getpid(), dbCount.Add(1), slug)
}

func ensure() (string, error) {
	if uri := os.Getenv(EnvURI); uri != "" {
		return uri, nil
	}
	once.Do(func() { srv, srvErr = start() })
	if srvErr != nil {
		return "", srvErr
	}
	return srv.uri, nil
}

func start() (*server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &server{cmd: cmd, stdin: stdin, done: make(chan struct{})}

	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "LISTEN "); ok {
				addr <- a
				break
			}
		}
		// Keep draining so the child never blocks on a full pipe.
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(s.done)
	}()

	select {
	case a := <-addr:
		s.uri = "mongodb://" + a + "/"
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("%s exited before listening: %v", bin, cmd.ProcessState)
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		<-s.done
		return nil, fmt.Errorf("%s did not listen within %v", bin, startTimeout)
	}
}

// Binary returns the path of the ferretserver binary, building it into the
// cache first when needed.
func Binary() (string, error) {
	dir, err := sourceDir()
	if err != nil {
		return "", err
	}
	key, err := sourceKey(dir)
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	cacheDir := filepath.Join(cache, "leasekeeper", "ferretserver")
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(cacheDir, "ferretserver-"+key)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}

	// Several test binaries (go test runs packages in parallel) may need
	// the server at once: one builds while the others wait on the lock,
	// then find the finished binary.
	// Where file locks are unsupported, concurrent builds race instead, and
	// the atomic rename of the finished binary keeps the result sound.
	unlock, err := filelock.Lock(bin + ".lock")
	if errors.Is(err, errors.ErrUnsupported) {
		unlock, err = func() {}, nil
	}
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}

	tmp := fmt.Sprintf("%s.tmp%d", bin, os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	work, err := os.MkdirTemp(cacheDir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	modfile, err := patchedModfile(ctx, dir, work, buildEnv())
	if err != nil {
		return "", fmt.Errorf("build ferretserver: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-C", dir, "-modfile", modfile, "-o", tmp, ".")
	cmd.Env = buildEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("build ferretserver: %w\n%s", err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// buildEnv is the test's environment without the settings that must not
// reach the server build: GOFLAGS (it carries -race under `go test -race`
// in some setups, and -race here means minutes of compile; VCS stamping is
// off because the checkout may belong to another user), and a go.work
// that would pull the server into the leasekeeper build.
func buildEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GOFLAGS=") || strings.HasPrefix(kv, "GOWORK=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "GOFLAGS=-mod=readonly -buildvcs=false", "GOWORK=off")
}

// sourceDir finds ferretserver/ next to this file. The path comes from the
// compiled-in file name, which is this machine's checkout whenever the test
// binary was built here (always, for go test).
func sourceDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the mongotest sources")
	}
	dir := filepath.Join(filepath.Dir(file), "ferretserver")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("ferretserver sources not found (built with -trimpath?): %w", err)
	}
	return dir, nil
}

// sourceKey hashes the server's sources and the Go toolchain version, so a
// changed proxy or dependency gets a fresh binary.
func sourceKey(dir string) (string, error) {
	h := sha256.New()
	fmt.Fprintln(h, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, p := range patches {
		fmt.Fprintln(h, p.file, p.from, p.to)
	}
	for _, a := range added {
		fmt.Fprintln(h, a.file, a.code)
	}
	for _, name := range []string{"go.mod", "go.sum"} {
		if err := hashFile(h, filepath.Join(dir, name)); err != nil {
			return "", err
		}
	}
	goFiles, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", err
	}
	for _, f := range goFiles {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		if err := hashFile(h, f); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func hashFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintln(w, filepath.Base(path))
	_, err = io.Copy(w, f)
	return err
}
