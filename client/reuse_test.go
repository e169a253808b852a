package client_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/internal/pidreuse"
	"github.com/leasekeeper/leasekeeper/socketapi/socketapitest"
)

// TestReusedPIDIsRefusedTheDeadOwnersClaim: a worker claims a card and is
// killed; a new process lands on its pid, within and beyond a second of the
// dead worker's start, and so on its marker. The agent must not take it
// for the dead worker: it may not be handed the dead worker's claim back.
// The lease is long, so no heartbeat tick notices the death in between:
// only the identity the socket reads for the newcomer tells them apart.
func TestReusedPIDIsRefusedTheDeadOwnersClaim(t *testing.T) {
	if !pidreuse.Enter(t) {
		return
	}
	a := socketapitest.Start(t, socketapitest.Options{Lease: 10 * time.Minute})
	childCmd := func(action, card string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+action, apitype.SocketEnv+"="+a.Path, "LK_CARD="+card)
		cmd.Stderr = os.Stderr
		return cmd
	}
	for i, tc := range pidreuse.Cases {
		card := fmt.Sprintf("c%d", i)
		a.Card(t, card)

		holder := childCmd("claim-hold", card)
		if _, err := holder.StdinPipe(); err != nil { // held open until the kill
			t.Fatal(err)
		}
		out, err := holder.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var first childResult
		pid, deadStart := pidreuse.Dead(t, holder, func(int) {
			line, err := bufio.NewReader(out).ReadBytes('\n')
			if err != nil || json.Unmarshal(line, &first) != nil || first.Error != "" {
				t.Fatalf("holder said %q (%v)", line, err)
			}
		})
		pidreuse.WaitPastTicks(t, deadStart+tc.Ticks-1)

		newcomer := childCmd("claim", card)
		var got bytes.Buffer
		newcomer.Stdout = &got
		pidreuse.StartOnPID(t, pid, newcomer)
		what := pidreuse.Describe(pid, deadStart, pidreuse.StartTicks(t, pid))
		_ = newcomer.Wait()
		var res childResult
		if err := json.Unmarshal(got.Bytes(), &res); err != nil {
			t.Fatalf("newcomer said %q: %v", got.String(), err)
		}
		if res.Error == "" && res.Epoch == first.Epoch {
			t.Errorf("%s: %s was handed the dead worker's claim %s@%d", tc.Name, what, res.Marker, res.Epoch)
		}
		if res.Status != 403 {
			t.Errorf("%s: newcomer's claim = %+v, want 403 (a reused pid owns nothing)", tc.Name, res)
		}
	}
}
