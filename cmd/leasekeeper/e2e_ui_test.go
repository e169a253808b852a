package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// screenshotEnv names a file the browser test also writes its screenshot
// to: how docs/ui-board.png is made (see docs/OPERATIONS.md).
const screenshotEnv = "LEASEKEEPER_UI_SCREENSHOT"

// chromium finds a Chromium the test can drive; .ci/run installs Debian's
// package when it is missing.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium binary on PATH (chromium, chromium-browser, google-chrome or headless-shell): " +
		"the browser test needs one; .ci/run installs Debian's chromium package when it runs as root")
	return ""
}

// startUI runs `leasekeeper ui` on a free loopback port and returns the URL
// it printed.
func (e *env) startUI() string {
	e.t.Helper()
	cmd := exec.Command(binary, "ui", "--listen", "127.0.0.1:0")
	cmd.Env, cmd.Dir = e.Environ(), e.Dir
	var out, errs agentproc.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	e.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if e.t.Failed() {
			e.t.Logf("leasekeeper ui stderr:\n%s", errs.String())
		}
	})
	var url string
	agentproc.WaitFor(e.t, 20*time.Second, "leasekeeper ui to print its URL", func() bool {
		select {
		case <-done:
			e.t.Fatalf("leasekeeper ui exited: %s", errs.String())
		default:
		}
		line, _, ok := strings.Cut(out.String(), "\n")
		url = line
		return ok && strings.HasPrefix(line, "http://127.0.0.1:")
	})
	return url
}

// TestE2EBrowserBoard drives the board in a real headless Chromium against
// a real agent with the watchdog on: the page renders the board, a claim
// made from the CLI appears without a reload, a force-release removes it,
// and a worker killed with SIGKILL is reaped and its card moves.
//
// It does not run in parallel: a browser is the heaviest thing these tests
// start, and the other tests' agents keep leases of a few seconds on a
// shared machine.
func TestE2EBrowserBoard(t *testing.T) {
	chrome := chromium(t)
	e := newEnv(t, "lease: 3s\nreaper: {enabled: true, interval: 1s}\n")
	e.AgentEnv = []string{"LEASEKEEPER_REAPER=1"}
	e.Start()
	e.MustRun("card", "create", "build-1", "--title", "nightly build", "--label", "nightly")
	e.MustRun("card", "create", "deploy-1", "--title", "deploy the build", "--label", "deploy", "--depends-on", "build-1")
	e.MustRun("card", "create", "crash-1", "--title", "a worker that will be killed", "--label", "flaky")
	e.MustRun("card", "create", "hostile", "--title", "<script>alert(1)</script>", "--label", `"><img src=x onerror=alert(2)>`)
	e.MustRun("card", "create", "docs-1", "--title", "write the docs")
	url := e.startUI()

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.WindowSize(1500, 1000),
		chromedp.UserDataDir(t.TempDir()),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses root
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 4*time.Minute)
	defer cancel()

	var dialogs, exceptions atomic.Int32
	var lastException atomic.Value
	listenErr := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			dialogs.Add(1)
			go func() {
				_ = chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
					_, err := cdp.Call(ctx, tg, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{})
					return err
				}))
			}()
		case *runtime.EventExceptionThrown:
			exceptions.Add(1)
			lastException.Store(fmt.Sprintf("%s (line %d)", ev.ExceptionDetails.Text, ev.ExceptionDetails.LineNumber))
		}
	})
	if listenErr != nil {
		t.Fatalf("start chromium: %v", listenErr)
	}

	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// poll waits, in the page, until js is true (chromedp re-evaluates it
	// on every animation frame); the bound is generous for a shared
	// machine, the time it took is what the log reports.
	poll := func(what, js string) time.Duration {
		t.Helper()
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if ok, err := chromedp.Run(pctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(30*time.Second))); err != nil || !ok {
			t.Fatalf("waiting in the page for %s: %v", what, err)
		}
		return time.Since(start)
	}
	cardSel := func(id string) string { return `document.querySelector('#board [data-card="` + id + `"]')` }

	// The printed URL trades its token for a cookie and lands on /.
	run("open the board", chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`#board .column`)))
	loc := evalJS[string](t, ctx, `location.href`)
	if strings.Contains(loc, "token=") {
		t.Errorf("the address bar still holds the token: %s", loc)
	}
	poll("the live link", `document.getElementById('link').textContent === 'live'`)

	// One column per board state, in board order.
	cols := evalJS[[]string](t, ctx, `Array.from(document.querySelectorAll('#board .column')).map(c => c.dataset.state)`)
	var want []string
	for _, s := range board.DefaultBoard(true).States {
		want = append(want, s.Name)
	}
	if strings.Join(cols, ",") != strings.Join(want, ",") {
		t.Errorf("columns = %v, want the board's states in order %v", cols, want)
	}
	col := evalJS[string](t, ctx, cardSel("build-1")+`.closest('.column').dataset.state`)
	if col != board.StateReady {
		t.Errorf("build-1 is in column %q, want ready", col)
	}
	deps := evalJS[string](t, ctx, cardSel("deploy-1")+`.querySelector('.deps').textContent`)
	if !strings.Contains(deps, "blocked by build-1") {
		t.Errorf("deploy-1's dependencies read %q, want blocked by build-1", deps)
	}
	// A hostile title and label render as text: the very characters, no
	// element made of them, no dialog.
	title := evalJS[string](t, ctx, cardSel("hostile")+`.querySelector('.title').textContent`)
	label := evalJS[string](t, ctx, cardSel("hostile")+`.querySelector('.label').textContent`)
	injected := evalJS[int](t, ctx, `document.querySelectorAll('#board script, #board img').length`)
	if title != "<script>alert(1)</script>" || label != `"><img src=x onerror=alert(2)>` || injected != 0 {
		t.Errorf("hostile card: title %q, label %q, %d injected elements; want the text itself and none", title, label, injected)
	}

	// Nothing below reloads the page: a mark set now must survive.
	run("mark the page", chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))

	// A claim from the CLI shows up with its holder, epoch and a running
	// countdown.
	hold := e.startClaim("build-1", "--", "sh", "-c", workerScript, "sh", "build.pid")
	took := poll("build-1's holder", cardSel("build-1")+`?.querySelector('.holder') != null`)
	t.Logf("the claim appeared in the page %s after the CLI started (claim process start included)", took.Round(time.Millisecond))
	c := e.Card("build-1")
	holder := evalJS[string](t, ctx, cardSel("build-1")+`.querySelector('.holder').textContent`)
	epoch := evalJS[string](t, ctx, cardSel("build-1")+`.querySelector('.epoch').textContent`)
	lease1 := evalJS[string](t, ctx, cardSel("build-1")+`.querySelector('.lease').textContent`)
	if holder != c.Claim || epoch != "epoch "+strconv.FormatInt(c.ClaimEpoch, 10) {
		t.Errorf("page shows %q %q, want holder %q epoch %d", holder, epoch, c.Claim, c.ClaimEpoch)
	}
	if !regexp.MustCompile(`^\d+(m\d+)?\.\ds left$`).MatchString(lease1) {
		t.Errorf("countdown reads %q, want N.Ns left", lease1)
	}
	poll("the countdown to tick", cardSel("build-1")+`.querySelector('.lease').textContent !== `+strconv.Quote(lease1))
	poll("build-1 in the running column", cardSel("build-1")+`.closest('.column').dataset.state === 'in_progress'`)

	// A force-release from the CLI removes the holder.
	e.MustRun("card", "release", "build-1", "--force")
	poll("build-1's holder to go", cardSel("build-1")+` != null && `+cardSel("build-1")+`.querySelector('.holder') == null`)
	if code := hold.wait(t, 20*time.Second); code != claimExitLost {
		t.Errorf("claim after the force-release exited %d, want %d", code, claimExitLost)
	}

	// A worker killed with SIGKILL (claimer and command): the agent
	// expires its lease, the watchdog proves the run orphaned and files
	// the card; the page follows without a reload.
	crash := e.startClaim("crash-1", "--", "sh", "-c", workerScript, "sh", "crash.pid")
	workerPID := e.workerPID("crash.pid")
	poll("crash-1 held in the running column", cardSel("crash-1")+`?.querySelector('.holder') != null && `+
		cardSel("crash-1")+`.closest('.column').dataset.state === 'in_progress'`)
	if err := crash.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(workerPID, syscall.SIGKILL)
	crash.wait(t, 10*time.Second)
	var reaped board.Card
	agentproc.WaitFor(t, 60*time.Second, "the watchdog to take crash-1 out of the running column", func() bool {
		reaped = e.Card("crash-1")
		return !reaped.Claimed() && reaped.State != board.StateInProgress
	})
	poll("crash-1 in column "+reaped.State, cardSel("crash-1")+`?.closest('.column').dataset.state === `+strconv.Quote(reaped.State)+
		` && `+cardSel("crash-1")+`.querySelector('.holder') == null`)
	if reaped.GaveUp != nil {
		poll("crash-1 in the Needs-attention lane", `document.querySelector('#attention [data-card="crash-1"]') != null`)
	}
	t.Logf("the watchdog filed crash-1 to %s (gave up: %v)", reaped.State, reaped.GaveUp != nil)

	// A give-up stamp, as a worker writes one for a run it cannot resume,
	// puts the card in the Needs-attention lane with its reason.
	const gaveUp = "the run was pruned: nobody can tell whether its work was delivered"
	e.MustRun("card", "create", "stuck-1", "--title", "a run nobody can resume")
	wc := &client.Client{Socket: e.Socket}
	held, err := wc.Claim(ctx, "stuck-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := held.SetGaveUp(ctx, &board.GaveUp{RunID: "run-7", Reason: gaveUp, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	poll("stuck-1 in the Needs-attention lane", `document.querySelector('#attention [data-card="stuck-1"] .why')?.textContent === `+
		strconv.Quote("run run-7: "+gaveUp))

	// A claim held at the end, for the screenshot; the preview runs in
	// the page and writes nothing.
	e.startClaim("docs-1", "--", "sh", "-c", workerScript, "sh", "docs.pid")
	poll("docs-1's holder", cardSel("docs-1")+`?.querySelector('.holder') != null`)
	before := len(e.Events())
	run("run the preview", chromedp.Click(chromedp.ID(`preview-run`)), chromedp.WaitVisible(chromedp.CSS(`#preview-result, #preview-error`)))
	previewErr := evalJS[string](t, ctx, `document.getElementById('preview-error')?.textContent ?? ''`)
	if previewErr != "" {
		t.Errorf("preview: %s", previewErr)
	}
	if after := len(e.Events()); after != before {
		t.Errorf("the preview wrote: the log went from %d to %d events", before, after)
	}

	notReloaded := evalJS[bool](t, ctx, `window.notReloaded === true`)
	if !notReloaded {
		t.Error("the page was reloaded; updates must arrive without one")
	}
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d JavaScript dialogs opened: a hostile name ran as script", n)
	}
	if n := exceptions.Load(); n != 0 {
		t.Errorf("%d uncaught exceptions in the page, the last: %v", n, lastException.Load())
	}

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	shot := filepath.Join(t.TempDir(), "ui-board.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the board: %s", shot)
	if dst := os.Getenv(screenshotEnv); dst != "" {
		if err := os.WriteFile(dst, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot also written to %s", dst)
	}
}

// evalJS evaluates js in the page and decodes its value.
func evalJS[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}
