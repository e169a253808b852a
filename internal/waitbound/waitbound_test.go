package waitbound

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

const reportEnv = "WAITBOUND_TEST_REPORT"

func TestMain(m *testing.M) {
	if os.Getenv(reportEnv) != "" {
		// Run again by the test below: widen, and say what the testing
		// package will run with.
		Widen()
		fmt.Print(flag.Lookup("test.parallel").Value.String())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestWidenUnlessTheCommandLineSays: a binary widens to Parallel when the
// command line is silent, and keeps what it was told otherwise, even when
// that is the default.
func TestWidenUnlessTheCommandLineSays(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, Parallel},
		{[]string{"-test.parallel=3"}, 3},
		{[]string{"-test.v", "-test.parallel", "1"}, 1},
	} {
		cmd := exec.Command(os.Args[0], tc.args...)
		cmd.Env = append(os.Environ(), reportEnv+"=1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got, err := strconv.Atoi(strings.TrimSpace(string(out))); err != nil || got != tc.want {
			t.Errorf("args %q: test.parallel = %q, want %d", tc.args, out, tc.want)
		}
	}
}
