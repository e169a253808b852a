// Package docker_test checks the container packaging: without a container
// runtime, the static build the Dockerfile makes, `leasekeeper health` run
// exactly as the HEALTHCHECK runs it, the example files parsed for the
// fields that make the sidecar work, every shipped agent config loaded with
// the agent's own strict loader, and the agent as pid 1 of a pid namespace;
// with podman (podman_test.go), the image and the sidecar pattern in real
// containers. What is and is not covered: docs/OPERATIONS.md.
package docker_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/leasekeeper/leasekeeper/agent"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// staticBin is ./cmd/leasekeeper built the way the Dockerfile builds it.
var staticBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "docker-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	staticBin = filepath.Join(dir, "leasekeeper")
	code := func() int {
		defer os.RemoveAll(dir)
		if err := buildLikeTheDockerfile(staticBin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer stopPodman()
		return m.Run()
	}()
	os.Exit(code)
}

// instruction is one Dockerfile instruction with its continuation lines
// joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, COPY...
	args string
}

func parseDockerfile(t testing.TB) []instruction {
	t.Helper()
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

func all(ins []instruction, cmd string) []instruction {
	var out []instruction
	for _, in := range ins {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

func last(t testing.TB, ins []instruction, cmd string) instruction {
	t.Helper()
	got := all(ins, cmd)
	if len(got) == 0 {
		t.Fatalf("Dockerfile has no %s", cmd)
	}
	return got[len(got)-1]
}

// execForm decodes a JSON-array (exec form) argument list; a shell-form
// one is an error, because the image has no shell to run it.
func execForm(args string) ([]string, error) {
	var argv []string
	if err := json.Unmarshal([]byte(args), &argv); err != nil || len(argv) == 0 {
		return nil, fmt.Errorf("%q is not exec form (a JSON array): the image has no shell", args)
	}
	return argv, nil
}

// healthcheckArgv is the command of the HEALTHCHECK instruction.
func healthcheckArgv(t testing.TB) []string {
	t.Helper()
	hc := last(t, parseDockerfile(t), "HEALTHCHECK")
	_, cmd, ok := strings.Cut(hc.args, "CMD ")
	if !ok {
		t.Fatalf("HEALTHCHECK %q has no CMD", hc.args)
	}
	argv, err := execForm(strings.TrimSpace(cmd))
	if err != nil {
		t.Fatalf("HEALTHCHECK: %v", err)
	}
	return argv
}

var buildRE = regexp.MustCompile(`go build .*-o (\S+) (\./cmd/leasekeeper)\b`)

// buildLikeTheDockerfile builds with the environment and flags the
// Dockerfile's build RUN uses; it refuses a Dockerfile whose build is not
// CGO-free, since only a static binary runs on distroless/static.
func buildLikeTheDockerfile(out string) error {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		return err
	}
	var run string
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "RUN ") && buildRE.MatchString(line) {
			run = line
		}
	}
	if run == "" {
		return errors.New("Dockerfile: no RUN line builds ./cmd/leasekeeper")
	}
	if !strings.Contains(run, "CGO_ENABLED=0") {
		return fmt.Errorf("Dockerfile build %q does not set CGO_ENABLED=0: the binary would not be static", run)
	}
	// agentproc builds static, as this line does.
	return agentproc.CachedBuild("./cmd/leasekeeper", out)
}

// dynamicParts lists what makes an ELF file depend on a loader at run time.
func dynamicParts(file string) ([]string, error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var parts []string
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_INTERP:
			parts = append(parts, "PT_INTERP program header")
		case elf.PT_DYNAMIC:
			parts = append(parts, "PT_DYNAMIC program header")
		}
	}
	if f.Section(".interp") != nil {
		parts = append(parts, ".interp section")
	}
	if f.Section(".dynamic") != nil {
		parts = append(parts, ".dynamic section")
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, err
	}
	for _, l := range libs {
		parts = append(parts, "needs "+l)
	}
	return parts, nil
}

func TestStaticBinary(t *testing.T) {
	t.Parallel()
	parts, err := dynamicParts(staticBin)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 0 {
		t.Errorf("the CGO_ENABLED=0 build is not static: %v", parts)
	}
	// The check itself must be able to fail: a dynamically linked system
	// binary has to show up as dynamic.
	if sh, err := exec.LookPath("sh"); err == nil {
		real, _ := filepath.EvalSymlinks(sh)
		if parts, err := dynamicParts(real); err == nil && len(parts) == 0 {
			t.Logf("%s is static here too; the negative check proves nothing on this machine", real)
		} else if err == nil {
			t.Logf("control: %s is dynamic (%v)", real, parts)
		}
	}
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	ins := parseDockerfile(t)
	cfg := loadShipped(t, "agent.yaml")
	copies := all(ins, "COPY")
	copied := func(from, to string) bool {
		return slices.ContainsFunc(copies, func(in instruction) bool {
			f := strings.Fields(in.args)
			return len(f) >= 2 && f[len(f)-2] == from && f[len(f)-1] == to
		})
	}
	userUID := -1

	for _, tc := range []struct {
		name  string
		check func() error
	}{
		{"multi-stage onto distroless static", func() error {
			froms := all(ins, "FROM")
			if len(froms) < 2 {
				return fmt.Errorf("%d FROM lines, want a build stage and a runtime stage", len(froms))
			}
			final := strings.Fields(froms[len(froms)-1].args)[0]
			if !strings.HasPrefix(final, "gcr.io/distroless/static") && final != "scratch" {
				return fmt.Errorf("runtime stage is %s, want distroless/static or scratch", final)
			}
			if !copied("/out/leasekeeper", "/leasekeeper") {
				return errors.New("the built binary is not copied to /leasekeeper")
			}
			return nil
		}},
		{"USER is numeric and not root", func() error {
			u := last(t, ins, "USER").args
			uid, gid, _ := strings.Cut(u, ":")
			n, err := strconv.Atoi(uid)
			if err != nil {
				return fmt.Errorf("USER %q is not numeric: Kubernetes runAsNonRoot cannot verify a name", u)
			}
			if n == 0 {
				return fmt.Errorf("USER %q is root", u)
			}
			if gid != "" {
				if g, err := strconv.Atoi(gid); err != nil || g == 0 {
					return fmt.Errorf("USER group %q is not a numeric non-root gid", gid)
				}
			}
			userUID = n
			return nil
		}},
		{"HEALTHCHECK is exec form calling the binary", func() error {
			argv := healthcheckArgv(t)
			if !slices.Equal(argv, []string{"/leasekeeper", "health"}) {
				return fmt.Errorf("HEALTHCHECK runs %q, want [/leasekeeper health]", argv)
			}
			return nil
		}},
		{"ENTRYPOINT and CMD run the agent on the baked config", func() error {
			ep, err := execForm(last(t, ins, "ENTRYPOINT").args)
			if err != nil {
				return fmt.Errorf("ENTRYPOINT: %v", err)
			}
			cmd, err := execForm(last(t, ins, "CMD").args)
			if err != nil {
				return fmt.Errorf("CMD: %v", err)
			}
			if !slices.Equal(ep, []string{"/leasekeeper"}) || len(cmd) != 3 || cmd[0] != "agent" || cmd[1] != "--config" {
				return fmt.Errorf("ENTRYPOINT %q CMD %q, want [/leasekeeper] [agent --config FILE]", ep, cmd)
			}
			if !copied("packaging/docker/agent.yaml", cmd[2]) {
				return fmt.Errorf("CMD reads %s but the Dockerfile does not copy packaging/docker/agent.yaml there", cmd[2])
			}
			return nil
		}},
		{"clients find the agent's socket", func() error {
			env := last(t, ins, "ENV").args
			if want := "LEASEKEEPER_SOCKET=" + cfg.Socket; env != want {
				return fmt.Errorf("ENV %q, want %q (the socket of agent.yaml)", env, want)
			}
			return nil
		}},
		{"socket and store directories are volumes the agent owns", func() error {
			vols, err := execForm(last(t, ins, "VOLUME").args)
			if err != nil {
				return fmt.Errorf("VOLUME: %v", err)
			}
			for _, dir := range []string{path.Dir(cfg.Socket), path.Dir(cfg.Store.Path)} {
				if !slices.Contains(vols, dir) {
					return fmt.Errorf("VOLUME %q lacks %s", vols, dir)
				}
				owned := slices.ContainsFunc(copies, func(in instruction) bool {
					return strings.Contains(in.args, "--chown=") && strings.HasSuffix(in.args, " "+dir)
				})
				if !owned {
					return fmt.Errorf("%s is not created with --chown: a fresh volume there would be root's and the agent could not write it", dir)
				}
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.check(); err != nil {
				t.Error(err)
			}
		})
	}
	// The --chown uid must be the USER's, or the agent cannot write there.
	for _, in := range copies {
		if m := regexp.MustCompile(`--chown=(\d+)`).FindStringSubmatch(in.args); m != nil && userUID >= 0 {
			if got, _ := strconv.Atoi(m[1]); got != userUID {
				t.Errorf("COPY %s chowns to %d but USER is %d", in.args, got, userUID)
			}
		}
	}
}

// TestHealthcheck runs the HEALTHCHECK's own argv against the static
// binary: 1 with no agent, 0 against a live one, 1 again once it stopped.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	argv := healthcheckArgv(t)
	a := agentproc.New(t, staticBin, "")
	health := func() (string, int) {
		cmd := exec.Command(staticBin, argv[1:]...)
		cmd.Env = a.Environ()
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return string(out), 0
		case errors.As(err, &ee):
			return string(out), ee.ExitCode()
		}
		t.Fatalf("running %v: %v", argv, err)
		return "", -1
	}

	if out, code := health(); code != 1 {
		t.Errorf("health with no agent: exit %d, want 1\n%s", code, out)
	}
	a.Start()
	if out, code := health(); code != 0 || strings.TrimSpace(out) != "ok" {
		t.Errorf("health against a live agent: exit %d output %q, want 0 \"ok\"", code, out)
	}
	a.Stop()
	if out, code := health(); code != 1 {
		t.Errorf("health after the agent stopped: exit %d, want 1\n%s", code, out)
	}
}

// env is an agent.Environment with a fixed set of variables and uid.
func env(uid int, vars map[string]string) agent.Environment {
	return agent.Environment{
		LookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok },
		UID:       uid,
		WorkDir:   "/nonexistent",
	}
}

// loadShipped loads a shipped config file with the agent's strict loader.
func loadShipped(t testing.TB, file string) agent.Config {
	t.Helper()
	cfg, err := agent.LoadConfig(file, env(65532, nil))
	if err != nil {
		t.Fatalf("the agent refuses %s: %v", file, err)
	}
	return cfg
}

func TestShippedConfigsLoad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file       string
		wantSocket string
		wantStore  string
	}{
		{"agent.yaml", "/run/leasekeeper/leasekeeper.sock", "/var/lib/leasekeeper/board.db"},
		{"../systemd/agent.yaml", "/run/leasekeeper/leasekeeper.sock", "/var/lib/leasekeeper/leasekeeper.db"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			cfg := loadShipped(t, tc.file)
			if cfg.Socket != tc.wantSocket || cfg.Store.Backend != agent.BackendBolt || cfg.Store.Path != tc.wantStore {
				t.Errorf("socket %s store %s:%s, want %s bolt:%s", cfg.Socket, cfg.Store.Backend, cfg.Store.Path, tc.wantSocket, tc.wantStore)
			}
			// A new install has no older binary to protect: the gate is
			// on as shipped (DESIGN.md#gate).
			if cfg.Liveness != agent.LivenessPID || !cfg.Reaper.Enabled {
				t.Errorf("liveness %s reaper %v, want pid and the reaper on (DESIGN.md#gate)", cfg.Liveness, cfg.Reaper.Enabled)
			}
		})
	}
}

// TestImageConfigStartsAnAgent runs the image's CMD with the baked config,
// its absolute paths moved into a temporary directory: the config the
// container runs opens a store and serves.
func TestImageConfigStartsAnAgent(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a := agentproc.New(t, staticBin, "")
	// The state volume of a container is on a disk: the config as shipped
	// does not opt in to a tmpfs (DESIGN.md#board-on-disk).
	state, err := agentproc.DiskTempDir("lkstate")
	if err != nil {
		t.Skipf("the image's state directory needs a disk: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	moved := strings.NewReplacer("/run/leasekeeper/leasekeeper.sock", a.Socket,
		"/var/lib/leasekeeper/", state+"/").Replace(string(b))
	if moved == string(b) {
		t.Fatal("agent.yaml no longer names /run/leasekeeper or /var/lib/leasekeeper; update this test")
	}
	if err := os.WriteFile(a.Config, []byte(moved), 0o600); err != nil {
		t.Fatal(err)
	}
	a.Start()
	st := a.Status()
	if st.Socket != a.Socket || st.Liveness != agent.LivenessPID || !st.Reaper.Enabled {
		t.Errorf("status %+v, want socket %s, liveness pid, reaper on", st, a.Socket)
	}
	if _, err := os.Stat(filepath.Join(state, "board.db")); err != nil {
		t.Errorf("the bbolt file is not where agent.yaml puts it: %v", err)
	}
	if want := filepath.Join(state, "board.db"); st.Backend.Path != want {
		t.Errorf("status backend %+v, want the board file %s", st.Backend, want)
	}
}

type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Pid         string            `yaml:"pid"`
		User        string            `yaml:"user"`
		ReadOnly    bool              `yaml:"read_only"`
		Tmpfs       []string          `yaml:"tmpfs"`
		Volumes     []string          `yaml:"volumes"`
		Environment map[string]string `yaml:"environment"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// mountAt returns the source mounted at target in a compose volume list.
func mountAt(vols []string, target string) (string, bool) {
	for _, v := range vols {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == target {
			return parts[0], true
		}
	}
	return "", false
}

func TestComposeFile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	ag, ok := cf.Services["leasekeeper"]
	if !ok {
		t.Fatal("no leasekeeper service")
	}
	wk, ok := cf.Services["worker"]
	if !ok {
		t.Fatal("no worker service")
	}
	cfgFile, ok := mountAt(ag.Volumes, "/etc/leasekeeper/agent.yaml")
	if !ok {
		t.Fatal("the agent service does not mount a config at /etc/leasekeeper/agent.yaml (the image's CMD)")
	}
	cfg, err := agent.LoadConfig(cfgFile, env(65532, ag.Environment))
	if err != nil {
		t.Fatalf("the config compose mounts (%s) with the service's environment: %v", cfgFile, err)
	}
	sockDir := path.Dir(cfg.Socket)

	for _, tc := range []struct {
		name  string
		check func() error
	}{
		{"worker shares the agent's pid namespace", func() error {
			if wk.Pid != "service:leasekeeper" {
				return fmt.Errorf("worker pid %q, want service:leasekeeper (liveness %s needs the agent to see worker pids)", wk.Pid, cfg.Liveness)
			}
			return nil
		}},
		{"socket volume shared", func() error {
			a, ok1 := mountAt(ag.Volumes, sockDir)
			w, ok2 := mountAt(wk.Volumes, sockDir)
			if !ok1 || !ok2 || a != w {
				return fmt.Errorf("socket directory %s: agent mounts %q, worker %q; want the same named volume", sockDir, a, w)
			}
			if _, ok := cf.Volumes[a]; !ok {
				return fmt.Errorf("volume %q is not declared", a)
			}
			return nil
		}},
		{"worker dials the agent's socket", func() error {
			if got := wk.Environment["LEASEKEEPER_SOCKET"]; got != cfg.Socket {
				return fmt.Errorf("worker LEASEKEEPER_SOCKET %q, want %q", got, cfg.Socket)
			}
			return nil
		}},
		{"worker waits for a healthy agent", func() error {
			if got := wk.DependsOn["leasekeeper"].Condition; got != "service_healthy" {
				return fmt.Errorf("worker depends_on condition %q, want service_healthy", got)
			}
			return nil
		}},
		{"worker reaches the socket's group but is not an operator", func() error {
			uid, gid, _ := strings.Cut(wk.User, ":")
			if gid != "65532" {
				return fmt.Errorf("worker user %q: gid must be the agent's (65532) to open the 0660 socket", wk.User)
			}
			n, err := strconv.ParseUint(uid, 10, 32)
			if err != nil || slices.Contains(cfg.Operators, uint32(n)) {
				return fmt.Errorf("worker uid %q is an operator (%v) or not numeric", uid, cfg.Operators)
			}
			return nil
		}},
		{"a read-only agent still has a writable /tmp", func() error {
			if ag.ReadOnly && !slices.Contains(ag.Tmpfs, "/tmp") {
				return errors.New("read_only without a /tmp tmpfs: the store plugin's socket would go to the state volume")
			}
			return nil
		}},
		{"the gate is on as shipped", func() error {
			if !cfg.Reaper.Enabled || len(cfg.Warnings) != 0 {
				return fmt.Errorf("reaper enabled %v, warnings %v", cfg.Reaper.Enabled, cfg.Warnings)
			}
			return nil
		}},
		{"the example worker exists", func() error {
			src, ok := mountAt(wk.Volumes, "/app")
			if !ok {
				return nil // a real worker image needs no mount
			}
			_, err := os.Stat(filepath.Join(src, "worker.py"))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.check(); err != nil {
				t.Error(err)
			}
		})
	}
}

type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		ShareProcessNamespace bool `yaml:"shareProcessNamespace"`
		SecurityContext       struct {
			RunAsNonRoot bool  `yaml:"runAsNonRoot"`
			RunAsUser    int64 `yaml:"runAsUser"`
			RunAsGroup   int64 `yaml:"runAsGroup"`
			FSGroup      int64 `yaml:"fsGroup"`
		} `yaml:"securityContext"`
		InitContainers []k8sContainer `yaml:"initContainers"`
		Containers     []k8sContainer `yaml:"containers"`
		Volumes        []struct {
			Name      string    `yaml:"name"`
			EmptyDir  *struct{} `yaml:"emptyDir"`
			ConfigMap *struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
		} `yaml:"volumes"`
	} `yaml:"spec"`
}

type k8sContainer struct {
	Name          string   `yaml:"name"`
	RestartPolicy string   `yaml:"restartPolicy"`
	Args          []string `yaml:"args"`
	Env           []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
	StartupProbe    *k8sProbe `yaml:"startupProbe"`
	LivenessProbe   *k8sProbe `yaml:"livenessProbe"`
	SecurityContext struct {
		RunAsUser              *int64 `yaml:"runAsUser"`
		ReadOnlyRootFilesystem bool   `yaml:"readOnlyRootFilesystem"`
	} `yaml:"securityContext"`
}

type k8sProbe struct {
	Exec struct {
		Command []string `yaml:"command"`
	} `yaml:"exec"`
}

func (c k8sContainer) mount(path string) (volume string, ok bool) {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m.Name, m.SubPath == ""
		}
	}
	return "", false
}

func (c k8sContainer) env(name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func TestPodFile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]k8sObject{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("pod.yaml: %v", err)
		}
		objs[o.Kind] = o
	}
	cm, pod := objs["ConfigMap"], objs["Pod"]
	if cm.Kind == "" || pod.Kind == "" {
		t.Fatalf("pod.yaml holds %d documents; want a ConfigMap and a Pod", len(objs))
	}
	sidecar := slices.IndexFunc(pod.Spec.InitContainers, func(c k8sContainer) bool { return c.Name == "leasekeeper" })
	if sidecar < 0 {
		t.Fatal("no leasekeeper init container (native sidecar)")
	}
	ag := pod.Spec.InitContainers[sidecar]
	if len(pod.Spec.Containers) == 0 {
		t.Fatal("no worker container")
	}
	wk := pod.Spec.Containers[0]
	var agentVars = map[string]string{}
	for _, e := range ag.Env {
		agentVars[e.Name] = e.Value
	}
	cfg, err := agent.ParseConfig([]byte(cm.Data["agent.yaml"]), env(int(pod.Spec.SecurityContext.RunAsUser), agentVars))
	if err != nil {
		t.Fatalf("the ConfigMap's agent.yaml with the sidecar's environment: %v", err)
	}
	sockDir := path.Dir(cfg.Socket)
	volumeKind := func(name string) string {
		for _, v := range pod.Spec.Volumes {
			switch {
			case v.Name != name:
			case v.EmptyDir != nil:
				return "emptyDir"
			case v.ConfigMap != nil:
				return "configMap:" + v.ConfigMap.Name
			}
		}
		return ""
	}

	for _, tc := range []struct {
		name  string
		check func() error
	}{
		{"shared pid namespace", func() error {
			if !pod.Spec.ShareProcessNamespace && cfg.Liveness == agent.LivenessPID {
				return errors.New("liveness pid without shareProcessNamespace: the agent could not see worker pids")
			}
			return nil
		}},
		{"native sidecar", func() error {
			if ag.RestartPolicy != "Always" {
				return fmt.Errorf("sidecar restartPolicy %q, want Always", ag.RestartPolicy)
			}
			return nil
		}},
		{"socket volume shared", func() error {
			a, _ := ag.mount(sockDir)
			w, _ := wk.mount(sockDir)
			if a == "" || a != w || volumeKind(a) != "emptyDir" {
				return fmt.Errorf("socket directory %s: sidecar mounts %q, worker %q (%s); want one shared emptyDir", sockDir, a, w, volumeKind(a))
			}
			if got := wk.env("LEASEKEEPER_SOCKET"); got != cfg.Socket {
				return fmt.Errorf("worker LEASEKEEPER_SOCKET %q, want %q", got, cfg.Socket)
			}
			return nil
		}},
		{"config mounted whole from the ConfigMap", func() error {
			i := slices.Index(ag.Args, "--config")
			if len(ag.Args) < 2 || ag.Args[0] != "agent" || i < 0 || i+1 >= len(ag.Args) {
				return fmt.Errorf("sidecar args %q, want agent --config FILE", ag.Args)
			}
			file := ag.Args[i+1]
			v, whole := ag.mount(path.Dir(file))
			if volumeKind(v) != "configMap:"+cm.Metadata.Name || path.Base(file) != "agent.yaml" {
				return fmt.Errorf("--config %s is not the ConfigMap %s's agent.yaml", file, cm.Metadata.Name)
			}
			if !whole {
				return errors.New("the config is mounted with subPath: ConfigMap updates would never reach the agent")
			}
			return nil
		}},
		{"probes call the health command", func() error {
			for name, p := range map[string]*k8sProbe{"startupProbe": ag.StartupProbe, "livenessProbe": ag.LivenessProbe} {
				if p == nil || !slices.Equal(p.Exec.Command, []string{"/leasekeeper", "health"}) {
					return fmt.Errorf("%s is not exec [/leasekeeper health]", name)
				}
			}
			return nil
		}},
		{"non-root, worker not an operator", func() error {
			sc := pod.Spec.SecurityContext
			if !sc.RunAsNonRoot || sc.RunAsUser == 0 {
				return fmt.Errorf("pod securityContext %+v is not non-root", sc)
			}
			if sc.FSGroup != sc.RunAsGroup {
				return fmt.Errorf("fsGroup %d differs from runAsGroup %d: the worker could not open the 0660 socket", sc.FSGroup, sc.RunAsGroup)
			}
			uid := sc.RunAsUser
			if wk.SecurityContext.RunAsUser != nil {
				uid = *wk.SecurityContext.RunAsUser
			}
			if slices.Contains(cfg.Operators, uint32(uid)) {
				return fmt.Errorf("the worker's uid %d is an operator (%v)", uid, cfg.Operators)
			}
			return nil
		}},
		{"read-only root keeps /tmp writable", func() error {
			if v, _ := ag.mount("/tmp"); ag.SecurityContext.ReadOnlyRootFilesystem && volumeKind(v) != "emptyDir" {
				return errors.New("readOnlyRootFilesystem without an emptyDir at /tmp: the store plugin's socket would go to the socket volume the worker shares")
			}
			return nil
		}},
		{"MongoDB backend, gate on", func() error {
			if cfg.Store.Backend != agent.BackendMongo || !cfg.Reaper.Enabled {
				return fmt.Errorf("backend %s, reaper %v; want mongo with the gate on", cfg.Store.Backend, cfg.Reaper.Enabled)
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.check(); err != nil {
				t.Error(err)
			}
		})
	}
}
