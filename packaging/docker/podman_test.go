package docker_test

// Real containers, with podman: the image (its runtime stage rebuilt FROM
// scratch around the static binary, since base images cannot be pulled in
// CI), the agent as pid 1 of its container with a worker container in its
// pid namespace, the image's HEALTHCHECK, and the Kubernetes pod example
// through `podman kube play`. How to run them: docs/OPERATIONS.md,
// "Container tests".

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leasekeeper/leasekeeper/agent"
	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// podmanEnv, when set to "require", makes a missing or broken podman a
// failure instead of a skip (.ci/run sets it once it installed podman).
const podmanEnv = "LEASEKEEPER_TEST_PODMAN"

// podman runs podman with the flags these machines need (runc, the vfs
// driver, cgroupfs) against a storage of its own, so the tests neither see
// nor leave images and containers in the machine's default storage.
type podman struct {
	dir  string // storage, run root and containers.conf
	args []string
	env  []string
}

var (
	podmanOnce sync.Once
	podmanInst *podman
	podmanErr  error
	imageOnce  sync.Once
	imageErr   error
)

// testImage is the tag of the image the tests build.
const testImage = "localhost/leasekeeper:latest"

func newPodman() (*podman, error) {
	bin, err := exec.LookPath("podman")
	if err != nil {
		return nil, errors.New("podman is not installed")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return nil, errors.New("runc is not installed")
	}
	// Named volumes live under the storage root: on a disk, as a real
	// host's are, since the image's config keeps its board in one and does
	// not opt in to a tmpfs (DESIGN.md#board-on-disk).
	dir, err := agentproc.DiskTempDir("lkpodman")
	if err != nil {
		return nil, err
	}
	// crun and podman's default rlimits are refused on these machines.
	conf := filepath.Join(dir, "containers.conf")
	if err := os.WriteFile(conf, []byte("[containers]\ndefault_ulimits = []\n"), 0o644); err != nil {
		return nil, err
	}
	p := &podman{
		dir: dir,
		args: []string{bin, "--runtime", "runc", "--storage-driver", "vfs", "--cgroup-manager", "cgroupfs",
			"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run")},
		env: append(os.Environ(), "CONTAINERS_CONF="+conf),
	}
	if out, err := p.run("info", "--format", "{{.Host.OCIRuntime.Name}}"); err != nil {
		return nil, fmt.Errorf("podman info: %v: %s", err, out)
	}
	return p, nil
}

// stopPodman removes what the tests left in their podman storage, and the
// storage itself.
func stopPodman() {
	if podmanInst == nil {
		return
	}
	_, _ = podmanInst.run("pod", "rm", "-a", "-f")
	_, _ = podmanInst.run("rm", "-a", "-f", "-t", "0")
	_, _ = podmanInst.run("volume", "rm", "-a", "-f")
	_ = os.RemoveAll(podmanInst.dir)
}

// needPodman returns the shared podman, or skips (or, under podmanEnv=require,
// fails) the test where podman cannot run here.
func needPodman(t *testing.T) *podman {
	t.Helper()
	if testing.Short() {
		t.Skip("container tests do not run with -short")
	}
	podmanOnce.Do(func() { podmanInst, podmanErr = newPodman() })
	if podmanErr != nil {
		skipOrRequire(t, fmt.Sprintf("no real containers here: %v (install podman and runc to run this test)", podmanErr))
	}
	return podmanInst
}

func skipOrRequire(t *testing.T, why string) {
	t.Helper()
	if os.Getenv(podmanEnv) == "require" {
		t.Fatalf("%s=require, but %s", podmanEnv, why)
	}
	t.Skip(why)
}

// run runs one podman command and returns its combined output.
func (p *podman) run(args ...string) (string, error) {
	cmd := exec.Command(p.args[0], append(p.args[1:], args...)...)
	cmd.Env = p.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// runOut runs one podman command and returns its stdout alone (podman
// writes warnings, such as the missing systemd for health-check timers, to
// stderr).
func (p *podman) runOut(args ...string) (string, int, error) {
	cmd := exec.Command(p.args[0], append(p.args[1:], args...)...)
	cmd.Env = p.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return stdout.String() + stderr.String(), ee.ExitCode(), nil
	}
	return stdout.String(), 0, err
}

func (p *podman) must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := p.run(args...)
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// image builds testImage once per test binary.
func (p *podman) image(t *testing.T) {
	t.Helper()
	imageOnce.Do(func() { imageErr = p.buildImage(t) })
	if imageErr != nil {
		t.Fatal(imageErr)
	}
}

// runtimeStage turns the Dockerfile's runtime stage into a Containerfile
// FROM scratch: every instruction after the last FROM is kept as it is,
// except that what the build stage made (/out/NAME) is copied from the
// build context. The static binary and an empty directory are what the
// build stage makes.
func runtimeStage(ins []instruction) (string, error) {
	last := -1
	for i, in := range ins {
		if in.cmd == "FROM" {
			last = i
		}
	}
	if last < 0 {
		return "", errors.New("Dockerfile has no FROM")
	}
	fromBuild := regexp.MustCompile(`--from=\S+\s+`)
	var b strings.Builder
	b.WriteString("FROM scratch\n")
	for _, in := range ins[last+1:] {
		args := in.args
		if in.cmd == "COPY" && fromBuild.MatchString(args) {
			args = fromBuild.ReplaceAllString(args, "")
			f := strings.Fields(args)
			src := f[len(f)-2]
			name, ok := strings.CutPrefix(src, "/out/")
			if !ok || strings.Contains(name, "/") {
				return "", fmt.Errorf("COPY %s: the runtime stage copies %s from the build stage; the test only makes /out/leasekeeper and /out/empty", in.args, src)
			}
			f[len(f)-2] = "out/" + name
			args = strings.Join(f, " ")
		}
		fmt.Fprintf(&b, "%s %s\n", in.cmd, args)
	}
	// The stand-in worker command: the image has no shell and no sleep.
	b.WriteString("COPY out/sleep /sleep\n")
	return b.String(), nil
}

func (p *podman) buildImage(t *testing.T) error {
	ctxDir := filepath.Join(p.dir, "context")
	for _, d := range []string{"out/empty", "packaging/docker"} {
		if err := os.MkdirAll(filepath.Join(ctxDir, d), 0o755); err != nil {
			return err
		}
	}
	bin, err := os.ReadFile(staticBin)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "out/leasekeeper"), bin, 0o755); err != nil {
		return err
	}
	if err := agentproc.CachedBuild("./packaging/docker/testdata/sleep", filepath.Join(ctxDir, "out/sleep")); err != nil {
		return err
	}
	cfg, err := os.ReadFile("agent.yaml")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "packaging/docker/agent.yaml"), cfg, 0o644); err != nil {
		return err
	}
	cf, err := runtimeStage(parseDockerfile(t))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "Containerfile"), []byte(cf), 0o644); err != nil {
		return err
	}
	// The docker format keeps HEALTHCHECK (OCI image configs have no such
	// field).
	if out, err := p.run("build", "--format", "docker", "--network", "none", "-t", testImage, ctxDir); err != nil {
		return fmt.Errorf("podman build of\n%s\n%v: %s", cf, err, out)
	}
	return nil
}

// execJSON runs a leasekeeper command in a container and decodes its JSON.
func (p *podman) execJSON(t *testing.T, ctr string, v any, args ...string) {
	t.Helper()
	out, code, err := p.runOut(append([]string{"exec", ctr, "/leasekeeper"}, args...)...)
	if err != nil || code != 0 {
		t.Fatalf("podman exec %s leasekeeper %v: exit %d %v\n%s", ctr, args, code, err, out)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("leasekeeper %v: %v\n%s", args, err, out)
	}
}

func (p *podman) card(t *testing.T, ctr, id string) board.Card {
	t.Helper()
	var c board.Card
	p.execJSON(t, ctr, &c, "card", "show", id, "--json")
	return c
}

func (p *podman) status(t *testing.T, ctr string) apitype.Status {
	t.Helper()
	var st apitype.Status
	p.execJSON(t, ctr, &st, "status", "--json")
	return st
}

// healthcheck runs the container's HEALTHCHECK once, as the runtime does.
func (p *podman) healthcheck(t *testing.T, ctr string) (string, int) {
	t.Helper()
	out, code, err := p.runOut("healthcheck", "run", ctr)
	if err != nil {
		t.Fatalf("podman healthcheck run %s: %v", ctr, err)
	}
	return strings.TrimSpace(out), code
}

// hostPID is the pid, in this (the host's) namespace, of the container
// process whose command line contains what.
func (p *podman) hostPID(t *testing.T, ctr, what string) int {
	t.Helper()
	for line := range strings.SplitSeq(p.must(t, "top", ctr, "hpid", "args"), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.Contains(line, what) {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	t.Fatalf("no process of %s runs %q", ctr, what)
	return 0
}

// logsOnFailure logs the containers' output if the test fails (a cleanup
// registered after the one removing them, so it runs first).
func (p *podman) logsOnFailure(t *testing.T, ctrs ...string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, c := range ctrs {
			out, _ := p.run("logs", c)
			insp, _ := p.run("inspect", "--format", "{{.State.Status}} exit {{.State.ExitCode}} health {{.State.Health}}", c)
			t.Logf("container %s: %s\n%s", c, insp, out)
		}
	})
}

// unique names this test's containers and volumes.
func unique(name string) string {
	return fmt.Sprintf("lk-%s-%d", name, os.Getpid())
}

// TestContainerSidecar runs the sidecar pattern with real containers: the
// agent as pid 1 of its container (gate on, no writable /tmp: a read-only
// scratch root), a worker container in its pid namespace sharing the socket
// volume and claiming a card with the CLI; the worker container killed, its
// lease expired at once by the pid probe and the card recovered by the
// agent's reaper under "reaper:<host>-1"; the HEALTHCHECK healthy, then
// unhealthy while the store does not answer.
func TestContainerSidecar(t *testing.T) {
	p := needPodman(t)
	p.image(t)
	ag, wk := unique("agent"), unique("worker")
	sock, state := unique("sock"), unique("state")
	t.Cleanup(func() {
		_, _ = p.run("rm", "-f", "-t", "0", wk)
		_, _ = p.run("rm", "-f", "-t", "0", ag)
		_, _ = p.run("volume", "rm", "-f", sock, state)
	})
	p.logsOnFailure(t, ag, wk)
	cfg := loadShipped(t, "agent.yaml")
	sockDir, stateDir := filepath.Dir(cfg.Socket), filepath.Dir(cfg.Store.Path)

	p.must(t, "run", "-d", "--name", ag, "--network", "none",
		"--read-only", "--read-only-tmpfs=false", // no /tmp at all, as in a scratch image
		"-e", "LEASEKEEPER_REAPER=1",
		"-v", sock+":"+sockDir, "-v", state+":"+stateDir, testImage)
	agentproc.WaitFor(t, 30*time.Second, "the agent container to be healthy", func() bool {
		_, code := p.healthcheck(t, ag)
		return code == 0
	})
	st := p.status(t, ag)
	if st.PID != 1 || st.Marker != st.Host+"-1" || !st.Reaper.Enabled {
		t.Fatalf("agent status pid %d marker %q reaper %+v: want pid 1, marker %s-1, the gate on", st.PID, st.Marker, st.Reaper, st.Host)
	}
	if logs := p.must(t, "logs", ag); !strings.Contains(logs, "state directory") {
		t.Errorf("with no writable /tmp the agent did not say its plugin socket is in the state directory:\n%s", logs)
	}

	p.must(t, "exec", ag, "/leasekeeper", "card", "create", "demo-1")
	p.must(t, "run", "-d", "--name", wk, "--network", "none", "--no-healthcheck",
		"--pid", "container:"+ag, "--user", "10001:65532",
		"-v", sock+":"+sockDir, testImage, "claim", "demo-1", "--", "/sleep")
	var held board.Card
	agentproc.WaitFor(t, 30*time.Second, "the worker container's claim", func() bool {
		held = p.card(t, ag, "demo-1")
		return held.Claim != ""
	})
	m, err := board.ParseMarker(held.Claim)
	if err != nil || m.Host != st.Host || m.PID <= 1 || m.Recovery {
		t.Fatalf("claim marker %q (%v): want a worker of host %s seen through the shared pid namespace", held.Claim, err, st.Host)
	}

	// Killed: every process of the worker container gets SIGKILL. The
	// agent's next heartbeat tick sees the owner's pid gone, expires the
	// lease, and wakes the reaper (the gate is on), whose pass recovers
	// the card at once rather than at its next interval
	// (DESIGN.md#owner-dead): the card ends unclaimed, moved by
	// reaper:<host>-1: back to the pool as a retry of the orphaned run,
	// which is machine provenance and so carries no actor
	// (DESIGN.md#retries, DESIGN.md#machine-reasons), or filed by its
	// verdict under the reaper's name.
	p.must(t, "kill", wk)
	rec := board.RecoveryMarker(st.Marker)
	agentproc.WaitFor(t, 30*time.Second, "the reaper to recover the card", func() bool {
		c := p.card(t, ag, "demo-1")
		return c.Claim == "" && c.State != held.State
	})
	if logs := p.must(t, "logs", ag); !strings.Contains(logs, "owner_dead") {
		t.Errorf("the agent did not log the claim lost with its owner dead:\n%s", logs)
	}
	out := p.must(t, "exec", ag, "/leasekeeper", "events", "--json")
	var moved bool
	for line := range strings.SplitSeq(out, "\n") {
		var ev board.Event
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Card == "demo-1" && ev.Type == board.EventState &&
			(ev.Actor == rec || ev.Reason == board.ReasonRetry) {
			moved = true
		}
	}
	if !moved {
		t.Errorf("no state move of demo-1 by %s in the event log:\n%s", rec, out)
	}

	// The store stops answering (its plugin process stopped): unhealthy.
	plugin := p.hostPID(t, ag, "store-plugin")
	if err := syscall.Kill(plugin, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(plugin, syscall.SIGCONT) })
	var hc string
	agentproc.WaitFor(t, 30*time.Second, "the health check to fail with the store stopped", func() bool {
		var code int
		hc, code = p.healthcheck(t, ag)
		return code != 0
	})
	if !strings.Contains(hc, "unhealthy") {
		t.Errorf("podman healthcheck run: %q, want unhealthy", hc)
	}
	if err := syscall.Kill(plugin, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	agentproc.WaitFor(t, 30*time.Second, "the health check to pass again", func() bool {
		_, code := p.healthcheck(t, ag)
		return code == 0
	})
}

// TestContainerPodExample plays pod.yaml with `podman kube play`. podman
// has no native sidecars (an init container with restartPolicy: Always,
// which it also refuses to give probes), so the sidecar runs as the pod's
// first container, which is how a cluster without native sidecars runs it.
// There is no MongoDB for the ConfigMap's URI, so the agent keeps a bbolt
// file in the socket volume. The rest is the example as shipped: the
// shared pid namespace, the socket emptyDir, the /tmp emptyDir of the
// read-only root, the security contexts and the probes.
func TestContainerPodExample(t *testing.T) {
	p := needPodman(t)
	if _, err := exec.LookPath("catatonit"); err != nil {
		skipOrRequire(t, "podman kube play needs catatonit for the pod's infra container (package catatonit)")
	}
	p.image(t)
	b, err := os.ReadFile("pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := podForPodman(b)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(file, docs, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := p.run("tag", testImage, "localhost/my-worker:latest"); err != nil {
		t.Fatalf("podman tag: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = p.run("kube", "down", file) })
	// Created, not started: the card must exist before the worker claims it.
	if out, err := p.run("kube", "play", "--network", "none", "--start=false", file); err != nil {
		t.Fatalf("podman kube play:\n%s\n%v: %s", docs, err, out)
	}
	ag, wk := "worker-leasekeeper", "worker-worker"
	p.logsOnFailure(t, ag, wk)
	if out, err := p.run("pod", "inspect", "worker", "--format", "{{.SharedNamespaces}}"); err != nil || !strings.Contains(out, "pid") {
		skipOrRequire(t, fmt.Sprintf("this podman does not share the pod's pid namespace (shareProcessNamespace): %v %s", err, out))
	}
	p.must(t, "pod", "start", "worker")
	_, _ = p.run("stop", "-t", "0", wk)
	// The probes' command, run as the kubelet runs an exec probe. (podman
	// 4.3 turns exec probes into shell commands, which a shell-less image
	// cannot run, so its own health check of this pod says nothing.)
	agentproc.WaitFor(t, 30*time.Second, "the sidecar's probe command to pass", func() bool {
		_, code, err := p.runOut("exec", ag, "/leasekeeper", "health")
		return err == nil && code == 0
	})
	p.must(t, "exec", ag, "/leasekeeper", "card", "create", "demo-1")
	p.must(t, "start", wk)
	var c board.Card
	agentproc.WaitFor(t, 30*time.Second, "the worker's claim", func() bool {
		c = p.card(t, ag, "demo-1")
		return c.Claim != ""
	})
	st := p.status(t, ag)
	if len(st.Claims) != 1 || st.Claims[0].PID <= 1 || st.Claims[0].Marker != c.Claim {
		t.Errorf("agent holds %+v, want the worker's claim %s with the pid it sees", st.Claims, c.Claim)
	}
}

// podForPodman rewrites pod.yaml for podman kube play (see
// TestContainerPodExample): the native sidecar becomes the first container,
// its metrics port goes (the pod has no network), and the store is a bbolt
// file in the socket volume. The worker runs the CLI claim.
func podForPodman(b []byte) ([]byte, error) {
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		switch doc["kind"] {
		case "ConfigMap":
			data := doc["data"].(map[string]any)
			var cfg map[string]any
			if err := yaml.Unmarshal([]byte(data["agent.yaml"].(string)), &cfg); err != nil {
				return nil, err
			}
			cfg["store"] = map[string]any{"backend": agent.BackendBolt, "path": "/run/leasekeeper/board.db"}
			y, err := yaml.Marshal(cfg)
			if err != nil {
				return nil, err
			}
			data["agent.yaml"] = string(y)
		case "Pod":
			spec := doc["spec"].(map[string]any)
			inits, _ := spec["initContainers"].([]any)
			ctrs, _ := spec["containers"].([]any)
			var sidecars []any
			for _, c := range inits {
				c := c.(map[string]any)
				if c["restartPolicy"] == "Always" {
					delete(c, "restartPolicy")
					delete(c, "ports")
					sidecars = append(sidecars, c)
				}
			}
			if len(sidecars) != 1 || len(ctrs) != 1 {
				return nil, fmt.Errorf("pod.yaml has %d native sidecars and %d containers, want one of each", len(sidecars), len(ctrs))
			}
			delete(spec, "initContainers")
			wk := ctrs[0].(map[string]any)
			wk["args"] = []any{"claim", "demo-1", "--", "/sleep"}
			wk["image"] = "localhost/my-worker:latest"
			sidecars[0].(map[string]any)["image"] = testImage
			spec["containers"] = append(sidecars, wk)
			spec["restartPolicy"] = "Never"
		}
		if err := enc.Encode(doc); err != nil {
			return nil, err
		}
	}
	enc.Close()
	return out.Bytes(), nil
}
