package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version is set by a release build:
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/leasekeeper
//
// When it is empty the version comes from the build information the go
// command stamps into every binary it builds (see buildVersion).
var version string

// buildVersion is the one version string the binary reports: on --version,
// by `leasekeeper version`, in the agent's status and in the
// leasekeeper_build_info metric.
func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return versionFrom(info)
}

// versionFrom composes the version from build information: the main
// module's version ("devel" when the go command had none), then the VCS
// revision (12 digits) unless the module version already carries it (a
// pseudo-version does), then "-dirty" when the working tree had changes.
func versionFrom(info *debug.BuildInfo) string {
	v := info.Main.Version
	// The go command marks a module version built from a modified tree
	// with "+dirty"; vcs.modified says the same, once.
	v = strings.TrimSuffix(v, "+dirty")
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var rev string
	var modified bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" && !strings.Contains(v, rev) {
		v += "-" + rev
	}
	if modified {
		v += "-dirty"
	}
	return v
}

func newVersionCmd(env *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Long: `Print the version of this binary (the same string as --version, the
agent's status and the leasekeeper_build_info metric) and the Go release
that built it.`,
		Args: exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(env.stdout, "leasekeeper %s (%s)\n", buildVersion(), runtime.Version())
			return err
		},
	}
}
