package main

import (
	"context"
	"fmt"
	"html"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/ui"
)

type uiOpts struct {
	listen string
	open   bool
}

func newUICmd(env *cli) *cobra.Command {
	var o uiOpts
	c := &cobra.Command{
		Use:   "ui [--listen 127.0.0.1:8080] [--open]",
		Short: "Serve a read-only board view in the browser",
		Long: `Serve the board in a browser: its columns in board order, each card's
claim, epoch and live lease countdown, its last run and its dependencies; a
Needs-attention lane (give-ups, expired claims the watchdog keeps, stuck
recovery claims); charts of throughput, queue depth and lease health; the
watchdog's gate, last pass and a dry-run preview; the agent's health. A
search box filters by card id and title; a card's page shows its runs,
events and timeline. The page updates live from the agent's event stream,
replacing only what changed; a column shows 50 cards and "N more". When the
agent stops, the page says so and recovers with it.

The UI talks to the agent over its socket as you, so it shows what you could
read with the CLI; the preview needs an operator uid. It listens on loopback
only and prints a URL with a token minted at start, good for one use: the
page is served only to the browser that opened that URL first (restart the
command for a new one). Reach it from another machine through an
SSH tunnel (ssh -L 8080:127.0.0.1:8080 host).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return runUI(cmd.Context(), env, o) },
	}
	c.Flags().StringVar(&o.listen, "listen", ui.DefaultListen, "loopback address to serve on (port 0: any free port)")
	c.Flags().BoolVar(&o.open, "open", false, "open the board in the desktop's browser (xdg-open, through a private page: the token stays out of the process list)")
	return c
}

func runUI(ctx context.Context, env *cli, o uiOpts) error {
	if err := ui.CheckListen(o.listen); err != nil {
		return withCode(exitUsage, err)
	}
	c := env.client()
	if _, err := c.Status(ctx); err != nil {
		return env.agentError(c, err)
	}
	srv, err := ui.Listen(ui.Config{
		Client: c,
		Listen: o.listen,
		Logger: slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	// The URL alone on stdout, for scripts; the explanation on stderr.
	fmt.Fprintf(env.stderr, "leasekeeper: serving the board for the agent at %s; open (Ctrl-C stops):\n", c.SocketPath())
	fmt.Fprintln(env.stdout, srv.URL())
	if o.open {
		argv, cleanup, err := openerArgv(srv.URL())
		if err != nil {
			fmt.Fprintf(env.stderr, "leasekeeper: could not open a browser (%v): open the URL above yourself\n", err)
		} else {
			defer cleanup()
			opener := exec.Command(argv[0], argv[1:]...)
			if err := opener.Start(); err != nil {
				fmt.Fprintf(env.stderr, "leasekeeper: could not open a browser (%v): open the URL above yourself\n", err)
			} else {
				go func() { _ = opener.Wait() }()
			}
		}
	}
	return srv.Serve(ctx)
}

// openerArgv prepares what --open runs: not the URL, whose token any local
// user could read in the process list, but a page that redirects to it,
// written to a fresh directory only this user can enter. cleanup removes
// the directory; call it once the browser has had its chance (at exit).
func openerArgv(url string) (argv []string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "leasekeeper-ui-") // mode 0700
	if err != nil {
		return nil, nil, err
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	// One navigation only (a meta refresh, no script as well): the token
	// opens one session, and a second request for it is refused.
	page := "<!doctype html>\n<meta charset=\"utf-8\">\n" +
		"<meta name=\"referrer\" content=\"no-referrer\">\n" +
		"<meta http-equiv=\"refresh\" content=\"0;url=" + html.EscapeString(url) + "\">\n" +
		"<title>leasekeeper ui</title>\n" +
		"<p>Opening the board…</p>\n"
	name := filepath.Join(dir, "open.html")
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, err = f.WriteString(page)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return []string{"xdg-open", name}, cleanup, nil
}
