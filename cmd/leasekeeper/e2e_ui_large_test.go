package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasekeeper/leasekeeper/board"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// TestE2EBrowserLargeBoard opens a 10,000-card board (a real bbolt file
// seeded before the agent starts) in headless Chromium at 1280 px: the
// page is a page of cards per column, not 10,000 articles; it is a screen
// or two tall, not 158,000 px (2,000 cards before columns showed a page);
// scrolled to the failed column, a card moved from the CLI shows up with
// the scroll kept. It logs what it measured.
func TestE2EBrowserLargeBoard(t *testing.T) {
	chrome := chromium(t)
	e := newEnv(t, "lease: 3s\n")
	seedLargeBoard(t, filepath.Join(e.Dir, "board.db"), 10_000)
	e.Start()
	url := e.startUI()

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()
	poll := func(what, js string) time.Duration {
		t.Helper()
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if ok, err := chromedp.Run(pctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(60*time.Second))); err != nil || !ok {
			t.Fatalf("waiting in the page for %s: %v", what, err)
		}
		return time.Since(start)
	}

	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	start := time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`#board .column`))); err != nil {
		t.Fatalf("open the board: %v", err)
	}
	loaded := time.Since(start)
	poll("the live link", `document.getElementById('link').textContent === 'live'`)
	articles := evalJS[int](t, ctx, `document.querySelectorAll('#board [data-card]').length`)
	height := evalJS[int](t, ctx, `document.documentElement.scrollHeight`)
	nodes := evalJS[int](t, ctx, `document.getElementsByTagName('*').length`)
	t.Logf("10,000 cards at 1280 px: loaded in %s, %d cards rendered, %d elements, the page %d px tall", loaded.Round(time.Millisecond), articles, nodes, height)
	if articles > 5*50 {
		t.Errorf("%d cards rendered, want a page (50) a column", articles)
	}
	if height > 5000 {
		t.Errorf("the page is %d px tall, want a few screens at most", height)
	}

	scroller := `document.querySelector('#board .columns')`
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](scroller+`.scrollLeft = `+scroller+`.scrollWidth`)); err != nil {
		t.Fatal(err)
	}
	scrolled := evalJS[int](t, ctx, scroller+`.scrollLeft`)
	if scrolled <= 0 {
		t.Fatalf("the columns do not scroll sideways at 1280 px")
	}
	// A column lists its cards oldest first: card-00002, among the first
	// created, shows in the failed column's first page.
	e.MustRun("card", "move", "card-00002", board.StateFailed)
	took := poll("card-00002 in the failed column", `document.querySelector('[data-state="failed"] [data-card="card-00002"]') != null`)
	t.Logf("a move from the CLI showed in %s (CLI process included)", took.Round(time.Millisecond))
	if got := evalJS[int](t, ctx, scroller+`.scrollLeft`); got != scrolled {
		t.Errorf("the columns' scroll went from %d to %d px across an update; want it kept", scrolled, got)
	}
}

// seedLargeBoard writes n cards into a new bbolt file: 20% in the backlog,
// 40% ready, 20% in progress (claimed by a worker of another host, a lease
// of an hour), 10% done, 10% failed.
func seedLargeBoard(t *testing.T, path string, n int) {
	t.Helper()
	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	states := []string{board.StateBacklog, board.StateBacklog, board.StateReady, board.StateReady, board.StateReady, board.StateReady,
		board.StateInProgress, board.StateInProgress, board.StateDone, board.StateFailed}
	const workers = 32
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				id, st := fmt.Sprintf("card-%05d", i), states[i%10]
				if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: id, Title: fmt.Sprintf("task %d of the nightly batch", i), State: st}); err != nil {
					errs <- err
					return
				}
				if st == board.StateInProgress {
					if _, err := s.Claim(ctx, board.ClaimParams{Card: id, Marker: board.WorkerMarker("elsewhere", 1000+i), Lease: time.Hour}); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("seed: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
