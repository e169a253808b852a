package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// TestE2EAMissedKeepaliveDoesNotFreeTheCardBeforeTheDeadline: in keepalive
// mode a holder that stops pinging (stopped, starved) still trusts its
// claim until the deadline the agent last vouched for
// (DESIGN.md#client-deadline), and nothing proves it gone before then. So
// its card must not be free for the next worker before that deadline, even
// once the heartbeat has declared the claim lost (DESIGN.md#keepalive).
// The holders here claim cards with no run (row 4 of the decision table
// releases such a card) and never ping; the reaper passes every second,
// so a lease ended early would be acted on at once. The claims are spread
// over a heartbeat interval (3s, a third of the 9s lease), so some are
// made just before a tick: the keepalive window (two ticks) then runs out
// up to a tick before their deadline, room for several passes. Every card
// must still come free once its lease has run out.
func TestE2EAMissedKeepaliveDoesNotFreeTheCardBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	const n = 5
	e := newEnv(t, "lease: 9s\nliveness: keepalive\nreaper: {enabled: true, interval: 1s}\n")
	e.Start()
	for i := range n {
		e.MustRun("card", "create", fmt.Sprintf("c%d", i))
	}
	// The reaper decides by the store's clock only once it trusts it
	// (DESIGN.md#clock-steps).
	agentproc.WaitFor(t, 20*time.Second, "the reaper to trust the store's clock", func() bool {
		return !strings.Contains(e.MustRun("reaper", "pass"), "not trusted")
	})

	deadlines := map[string]time.Time{}
	var last time.Time
	spread := time.NewTicker(600 * time.Millisecond)
	defer spread.Stop()
	for i := range n {
		card := fmt.Sprintf("c%d", i)
		sent := time.Now()
		cr := silentHolder(t, e.Socket, card)
		// The holder trusts the claim until at least this instant: the
		// remaining time it was told, counted from before the request.
		deadlines[card] = sent.Add(time.Duration(cr.TrustedMS) * time.Millisecond)
		last = deadlines[card]
		<-spread.C
	}
	// Never ping. Once every card has come free, read when.
	released := func() []board.Event {
		var out []board.Event
		for _, ev := range e.Events() {
			if _, ok := deadlines[ev.Card]; ok && ev.Type == board.EventReleased {
				out = append(out, ev)
			}
		}
		return out
	}
	var evs []board.Event
	agentproc.WaitFor(t, time.Until(last)+30*time.Second, "every silent holder's card to come free once its lease ran out", func() bool {
		evs = released()
		return len(evs) == n
	})
	var freed int
	for _, ev := range evs {
		if d := deadlines[ev.Card]; ev.At.Before(d) {
			freed++
			t.Errorf("card %s released %s before its silent holder's trusted deadline (actor %q, reason %q)",
				ev.Card, d.Sub(ev.At).Round(time.Millisecond), ev.Actor, ev.Reason)
		}
	}
	t.Logf("%d of %d cards freed before their holder's deadline", freed, n)
}

// TestE2EARestartedAgentDoesNotAdoptAClaimItGaveUpForSilence: an agent
// that declared a silent holder's claim lost, killed and started again
// while that lease still has more than a renewal interval and two margins
// to run, must not take the claim back as a live worker's: its boot sweep
// would renew, for the silent holder, a claim it told the holder it lost
// (DESIGN.md#keepalive). The heartbeat marks the claim given up in the
// store, and the restarted agent's sweep reads the mark. The lease (30s,
// ticks of 10s) leaves the claim 20s when it is given up, against the 16s
// under which the sweep would leave it alone for being nearly over.
func TestE2EARestartedAgentDoesNotAdoptAClaimItGaveUpForSilence(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 30s\nliveness: keepalive\n")
	first := e.Start()
	e.MustRun("card", "create", "c0")
	silentHolder(t, e.Socket, "c0")
	var given board.Card
	agentproc.WaitFor(t, 45*time.Second, "the heartbeat to give the silent holder's claim up", func() bool {
		given = e.Card("c0")
		return given.Disowned()
	})
	if err := first.Crash(); err != nil {
		t.Fatal(err)
	}
	e.Start()
	var line string
	agentproc.WaitFor(t, 20*time.Second, "the restarted agent's boot sweep to judge c0", func() bool {
		for l := range strings.SplitSeq(e.Log(), "\n") {
			if strings.Contains(l, "boot sweep") && strings.Contains(l, "card=c0") {
				line = l
				return true
			}
		}
		return false
	})
	if !strings.Contains(line, "action=disowned") || !strings.Contains(line, "gave the claim up") {
		t.Errorf("boot sweep: %s\nwant c0 disowned for the claim its agent gave up", line)
	}
	if c := e.Card("c0"); c.Token() != given.Token() || !c.ClaimLeaseUntil.Equal(given.ClaimLeaseUntil) {
		t.Errorf("after the restart c0 is held by %+v until %s, want %+v left to run out at %s",
			c.Token(), c.ClaimLeaseUntil, given.Token(), given.ClaimLeaseUntil)
	}
	if holds(e.Status(), "c0") {
		t.Errorf("the restarted agent vouches for c0's claim again")
	}
}

// silentHolderScript claims the card argv[2] over the socket argv[1], prints
// the answer's body, and then lives on without ever pinging until its stdin
// closes: a worker that is alive but silent (stopped, starved).
const silentHolderScript = `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
body = '{"card":"%s"}' % sys.argv[2]
s.sendall(('POST /v1/claims HTTP/1.1\r\nHost: leasekeeper\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' % (len(body), body)).encode())
data = b''
while True:
    b = s.recv(65536)
    if not b:
        break
    data += b
head, _, rest = data.partition(b'\r\n\r\n')
if b' 200 ' not in head.split(b'\r\n')[0]:
    sys.stderr.write(data.decode(errors='replace'))
    sys.exit(1)
sys.stdout.write(rest.decode() + '\n')
sys.stdout.flush()
sys.stdin.read()
`

// silentHolder starts a process that claims card and never pings, and
// returns the agent's answer to it; the process lives until the test ends.
func silentHolder(t *testing.T, socket, card string) apitype.ClaimResponse {
	t.Helper()
	cmd := exec.Command("python3", "-c", silentHolderScript, socket, card)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Skipf("python3: %v", err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("claim %s: %v; stderr:\n%s", card, err, stderr.String())
	}
	var cr apitype.ClaimResponse
	if err := json.Unmarshal([]byte(line), &cr); err != nil || cr.Liveness != apitype.LivenessKeepalive {
		t.Fatalf("claim %s: %q (%v), want a keepalive-mode grant", card, line, err)
	}
	return cr
}
