package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// config is what the flags chose.
type config struct {
	scenarios []string
	repeat    int
	duration  time.Duration // one throughput measurement
	workers   []int
	// workersFlag is -workers as given, for the report's command line.
	workersFlag string
	out         string
	smoke       bool
	loadNote    string
	profile     string // directory for pprof files, empty for none
	tmp         string // where stores, sockets and etcd's data dir go

	// sizes, smaller in smoke mode
	heartbeatClaims []int
	reaperCards     int
	lostSamples     int
	lifeMinPerWkr   int // the fewest lifecycles a measurement gives each worker
}

// args reconstructs the flags that matter for a reader of the report.
func (c config) args() string {
	parts := []string{"-repeat " + strconv.Itoa(c.repeat), "-duration " + c.duration.String()}
	if c.workersFlag != "" && c.workersFlag != defaultWorkers {
		parts = append(parts, "-workers "+c.workersFlag)
	}
	if c.smoke {
		parts = append([]string{"-smoke"}, parts...)
	}
	return strings.Join(parts, " ")
}

// defaultWorkers shows how throughput grows from one worker to many.
const defaultWorkers = "1,8,32"

var allScenarios = []string{"claim", "heartbeat", "reaper", "claimlost", "plugin", "mongo", "lifecycle", "fleet"}

func main() {
	if len(os.Args) > 1 && os.Args[1] == childFlag {
		os.Exit(childMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == pluginFlag {
		os.Exit(pluginMain(os.Args[2:]))
	}
	var (
		cfg       config
		scenarios = flag.String("scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios to run: "+strings.Join(allScenarios, ", "))
		workers   = flag.String("workers", defaultWorkers, "concurrent workers of the claim and lifecycle scenarios")
	)
	flag.IntVar(&cfg.repeat, "repeat", 5, "repeats of each measurement")
	flag.DurationVar(&cfg.duration, "duration", 3*time.Second, "length of one throughput measurement")
	flag.StringVar(&cfg.out, "out", "", "write the Markdown report here (ignored with -smoke)")
	flag.BoolVar(&cfg.smoke, "smoke", false, "a run of a few seconds that keeps the command from rotting: tiny sizes, one repeat, writes no file")
	flag.StringVar(&cfg.loadNote, "load-note", "", "a sentence on what else the machine was doing, printed in the report")
	flag.StringVar(&cfg.profile, "profile", "", "write CPU profiles of the heaviest paths into this directory")
	flag.Parse()

	cfg.scenarios = strings.Split(*scenarios, ",")
	for _, s := range cfg.scenarios {
		if !slices.Contains(allScenarios, s) {
			fmt.Fprintf(os.Stderr, "bench: unknown scenario %q (known: %s)\n", s, strings.Join(allScenarios, ", "))
			os.Exit(2)
		}
	}
	cfg.workersFlag = *workers
	for _, w := range strings.Split(*workers, ",") {
		n, err := strconv.Atoi(w)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: bad -workers entry %q\n", w)
			os.Exit(2)
		}
		cfg.workers = append(cfg.workers, n)
	}
	cfg.heartbeatClaims = []int{1_000, 10_000}
	cfg.reaperCards = 10_000
	cfg.lostSamples = 200
	cfg.lifeMinPerWkr = 4
	if cfg.smoke {
		cfg.repeat = 1
		cfg.duration = 150 * time.Millisecond
		cfg.heartbeatClaims = []int{200}
		cfg.reaperCards = 300
		cfg.lostSamples = 5
		cfg.lifeMinPerWkr = 1
		cfg.out = ""
		// The FerretDB test server takes minutes to compile when it is not
		// cached yet; a smoke run is seconds, so it leaves the twin's
		// scenarios out unless asked for by name.
		if !explicit(flag.CommandLine, "scenarios") {
			cfg.scenarios = slices.DeleteFunc(cfg.scenarios, func(s string) bool { return s == "mongo" || s == "fleet" })
		}
	}
	if cfg.repeat < 1 {
		fmt.Fprintln(os.Stderr, "bench: -repeat must be at least 1")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// explicit reports whether the named flag was given on the command line.
func explicit(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

func run(ctx context.Context, cfg config) error {
	// Unix socket paths are limited to about 100 bytes, so the temporary
	// directory is made directly under the system temp dir.
	tmp, err := os.MkdirTemp("", "lkbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfg.tmp = tmp
	if cfg.profile != "" {
		if err := os.MkdirAll(cfg.profile, 0o755); err != nil {
			return err
		}
	}

	rep := &report{started: time.Now(), machine: describeMachine(tmp), cfg: cfg, loadBefore: loadavg()}
	steps := map[string]func(context.Context, config, *report) error{
		"claim":     runClaim,
		"heartbeat": runHeartbeat,
		"reaper":    runReaper,
		"claimlost": runClaimLost,
		"plugin":    runPlugin,
		"mongo":     runMongo,
		"lifecycle": runLifecycle,
		"fleet":     runFleet,
	}
	for _, name := range allScenarios {
		if !slices.Contains(cfg.scenarios, name) {
			continue
		}
		fmt.Fprintf(os.Stderr, "== %s\n", name)
		t0 := time.Now()
		if err := steps[name](ctx, cfg, rep); err != nil {
			return fmt.Errorf("scenario %s: %w", name, err)
		}
		fmt.Fprintf(os.Stderr, "   %s done in %s\n", name, time.Since(t0).Round(time.Millisecond))
	}
	rep.finished = time.Now()
	rep.loadAfter = loadavg()

	rep.markdown(os.Stdout)
	if cfg.out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(cfg.out), 0o755); err != nil {
		return err
	}
	f, err := os.Create(cfg.out)
	if err != nil {
		return err
	}
	rep.markdown(f)
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s\n", cfg.out)
	return nil
}
