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
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
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
	// One attempt: the killed worker's card is filed to failed, the
	// right-hand column the scroll test below keeps in view, rather than
	// retried (DESIGN.md#retries).
	e.MustRun("card", "create", "crash-1", "--title", "a worker that will be killed", "--label", "flaky", "--max-attempts", "1")
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

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	shot := filepath.Join(t.TempDir(), "ui-board.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the board: %s", shot)
	// The other screenshots go beside it: ui-board-dark.png and the like.
	shotDir := ""
	if dst := os.Getenv(screenshotEnv); dst != "" {
		if err := os.WriteFile(dst, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot also written to %s", dst)
		shotDir = filepath.Dir(dst)
	}
	viewportShot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if shotDir != "" {
			if err := os.WriteFile(filepath.Join(shotDir, name), png, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("screenshot written to %s", filepath.Join(shotDir, name))
		}
	}

	// At 1280 px the columns overflow their scroller. Scrolled to its
	// right end (the failed column in view) and with the focus on a card's
	// link, an update that replaces the columns on both sides of the
	// scroller keeps both.
	run("a 1280 px window", chromedp.EmulateViewport(1280, 900))
	scroller := `document.querySelector('#board .columns')`
	if w := evalJS[int](t, ctx, scroller+`.scrollWidth - `+scroller+`.clientWidth`); w <= 0 {
		t.Fatalf("the columns do not overflow a 1280 px window (by %d px): nothing to scroll", w)
	}
	run("scroll the columns to the right and focus crash-1", chromedp.Evaluate[chromedp.Void](
		scroller+`.scrollLeft = `+scroller+`.scrollWidth; `+cardSel("crash-1")+`.querySelector('a.id').focus()`))
	scrolled := evalJS[int](t, ctx, scroller+`.scrollLeft`)
	if scrolled <= 0 {
		t.Fatalf("the columns' scroller did not scroll")
	}
	e.MustRun("card", "create", "late-1", "--title", "created while scrolled")
	e.MustRun("card", "label", "crash-1", "--add", "seen")
	poll("late-1 on the board", cardSel("late-1")+` != null`)
	// crash-1's column was replaced, the focus restored on its new link.
	poll("crash-1's new label", cardSel("crash-1")+`?.textContent.includes('seen')`)
	if got := evalJS[int](t, ctx, scroller+`.scrollLeft`); got != scrolled {
		t.Errorf("the columns' scroll went from %d to %d px across an update; want it kept", scrolled, got)
	}
	if got := evalJS[string](t, ctx, `document.activeElement?.closest('[data-card]')?.dataset.card ?? document.activeElement?.tagName`); got != "crash-1" {
		t.Errorf("the focus is on %q after an update, want crash-1's link", got)
	}

	// A column longer than a page shows 50 cards and "N more", which
	// shows the next page in place.
	for i := range 55 {
		if _, err := wc.CreateCard(ctx, board.CreateCardParams{ID: fmt.Sprintf("bulk-%02d", i), Title: "one of many"}); err != nil {
			t.Fatal(err)
		}
	}
	// Every card created first: a click races the column's replacement.
	poll("the ready column's \"more\" with every card", `document.querySelector('[data-state="ready"] a.more')?.textContent.includes('of 58')`)
	if n := evalJS[int](t, ctx, `document.querySelectorAll('[data-state="ready"] [data-card]').length`); n != 50 {
		t.Errorf("the ready column shows %d cards, want a page of 50", n)
	}
	run("show more", chromedp.Click(chromedp.CSS(`[data-state="ready"] a.more`)))
	poll("the whole ready column", `document.querySelectorAll('[data-state="ready"] [data-card]').length === 58 && document.querySelector('[data-state="ready"] a.more') == null`)
	// The column scrolls in itself; scrolled down, it stays so when an
	// update replaces it.
	readyCards := `document.querySelector('[data-state="ready"] .cards')`
	run("scroll the ready column down", chromedp.Evaluate[chromedp.Void](readyCards+`.scrollTop = 400`))
	down := evalJS[int](t, ctx, readyCards+`.scrollTop`)
	if down <= 0 {
		t.Fatalf("the ready column does not scroll in itself")
	}
	e.MustRun("card", "label", "bulk-10", "--add", "seen")
	poll("bulk-10's new label", cardSel("bulk-10")+`?.textContent.includes('seen')`)
	if got := evalJS[int](t, ctx, readyCards+`.scrollTop`); got != down {
		t.Errorf("the ready column's scroll went from %d to %d px across an update; want it kept", down, got)
	}

	// The search narrows the board as one types, by id or title.
	run("search", chromedp.SendKeys(chromedp.ID(`q`), "NIGHTLY"))
	poll("only build-1 on the board", `document.querySelectorAll('#board [data-card]').length === 1 && `+cardSel("build-1")+` != null`)
	if !strings.Contains(evalJS[string](t, ctx, `location.search`), "q=NIGHTLY") {
		t.Errorf("the address does not keep the search")
	}
	run("clear the search", chromedp.Evaluate[chromedp.Void](`(() => { const q = document.getElementById('q'); q.value = ''; q.dispatchEvent(new Event('input')); })()`))
	poll("the whole board again", cardSel("docs-1")+` != null && `+cardSel("late-1")+` != null`)

	// Dark mode follows the system's setting.
	setDark := func(dark bool) {
		t.Helper()
		v := "light"
		if dark {
			v = "dark"
		}
		run("prefers-color-scheme: "+v, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: v}}})
			return err
		}))
	}
	bg := func(sel string) string {
		return evalJS[string](t, ctx, `getComputedStyle(document.querySelector('`+sel+`')).backgroundColor`)
	}
	light := bg("body")
	setDark(true)
	if dark := bg("body"); dark == light || !isDark(dark) {
		t.Errorf("body background %s in dark mode (light: %s), want a dark one", dark, light)
	}
	if c := bg(".card"); !isDark(c) {
		t.Errorf("a card's background is %s in dark mode, want a dark one", c)
	}
	run("scroll back", chromedp.Evaluate[chromedp.Void](scroller+`.scrollLeft = 0; window.scrollTo(0, 0)`))
	viewportShot("ui-board-dark.png")
	setDark(false)

	// A phone: the columns stack, nothing is wider than the screen.
	run("a phone's viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	poll("the columns stacked", `getComputedStyle(`+scroller+`).flexDirection === 'column'`)
	if w := evalJS[int](t, ctx, `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("the page is %d px wide on a 390 px phone, want no sideways scroll", w)
	}
	if w := evalJS[int](t, ctx, `Math.round(document.querySelector('[data-state="failed"]').getBoundingClientRect().width)`); w < 300 {
		t.Errorf("a column is %d px wide on a 390 px phone, want the screen's width", w)
	}
	viewportShot("ui-board-phone.png")
	run("back to a desktop", chromedp.EmulateViewport(1280, 900))

	// The agent goes away: the link says so (not "live"), the board says
	// why in words, keeps what it showed, and comes back with the agent.
	e.Stop()
	poll("the link to say the agent is unreachable", `document.getElementById('link').textContent === 'agent unreachable' && document.getElementById('link').classList.contains('down')`)
	poll("the board to say why", `!document.getElementById('status').hidden && document.querySelector('#status .msg')?.textContent.includes('not running')`)
	// The message names the socket, whose random directory name may hold
	// "502" itself: only the rest of it is searched for the status code.
	if msg := evalJS[string](t, ctx, `document.querySelector('#status .msg').textContent`); strings.Contains(msg, "dial unix") || strings.Contains(strings.ReplaceAll(msg, e.Socket, ""), "502") {
		t.Errorf("the unreachable message is the transport's error: %q", msg)
	}
	if evalJS[bool](t, ctx, cardSel("build-1")+` == null`) {
		t.Errorf("the board emptied while the agent was down; want what it last read")
	}
	viewportShot("ui-board-unreachable.png")
	e.Start()
	poll("the link live again", `document.getElementById('link').textContent === 'live' && document.getElementById('status').hidden`)

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

	// A card's page draws its timeline: its states, its claims and runs,
	// its events.
	run("open crash-1's page", chromedp.Click(chromedp.CSS(`[data-card="crash-1"] a.id`)), chromedp.WaitVisible(chromedp.CSS(`svg.tl`)))
	bars := evalJS[int](t, ctx, `document.querySelectorAll('svg.tl rect.st, svg.tl rect.claim, svg.tl rect.run').length`)
	ticks := evalJS[int](t, ctx, `document.querySelectorAll('svg.tl rect.ev').length`)
	rows := evalJS[int](t, ctx, `document.querySelectorAll('.events tbody tr').length`)
	if bars < 4 || ticks != rows {
		t.Errorf("crash-1's timeline draws %d bars and %d event ticks for %d events: want its states, claim and run, and a tick an event", bars, ticks, rows)
	}
	viewportShot("ui-card.png")

	// The session's cookie gone (as when leasekeeper ui restarts with a
	// new token): the page says the session is over, not that the server
	// is unreachable.
	run("drop the cookie", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.ClearBrowserCookies, cdp.Empty{})
		return err
	}))
	poll("the page to say its session is over", `!document.getElementById('status').hidden && document.getElementById('status').textContent.includes('session is over')`)
}

// isDark says whether a computed rgb() colour is dark.
func isDark(rgb string) bool {
	var r, g, b int
	if _, err := fmt.Sscanf(rgb, "rgb(%d, %d, %d)", &r, &g, &b); err != nil {
		return false
	}
	return r+g+b < 3*80
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
