// Package ui serves the read-only board view of `leasekeeper ui`: the
// board's columns in board order with each card's claim, its lease
// countdown and its last run, a Needs-attention lane, the watchdog's gate,
// last pass and a dry-run preview, charts of throughput, queue depth and
// lease health, and the agent's health — updated live from the agent's
// event stream. A card's page adds its runs, its events and a timeline.
//
// An update sends only what changed: the live region is made of parts,
// each named by a hash of its HTML, and the page names the hashes it holds
// (parts.go). A column shows a page of cards; the card listing is reused
// while no event arrives (cardCache); a card's events are read through the
// feed's index of the log (feed.byCard), not a scan of it.
//
// The server is a client of the agent like the command line: it reaches the
// agent only over its Unix socket (package client), as the user who started
// it, so the page shows what that user could read with the CLI and the
// preview runs only for an operator uid. It never writes: every route is a
// GET except the preview, which asks the agent for a dry-run reaper pass,
// and the agent writes nothing for one.
//
// A page on any other site must not be able to read the board through a
// browser that has it open, and another local user must not be able to
// read it through the loopback port. So the server
//
//   - listens on a loopback address only (Listen refuses any other, and
//     checks the address it bound);
//   - requires a random token minted when it starts: the printed URL
//     carries it, the first request that brings it consumes it (a second
//     is refused), and the server sets an HttpOnly, SameSite=Strict
//     cookie named after its port that carries a secret of its own, minted
//     then, and redirects to the bare path on its own origin;
//   - refuses a request whose Host is not its listen address or
//     localhost on its port (DNS rebinding);
//   - sends no CORS headers, and requires the preview's POST to come from
//     its own origin;
//   - sends a Content-Security-Policy that allows only its own script and
//     style, and renders every name through html/template, so a hostile
//     card title is text.
//
// Cookies are scoped by host, not port: another server on the same
// loopback address, opened in the same browser, receives the cookie too.
// Listening on a loopback address of one's own (127.x.y.z) separates.
//
// Templates, script and style are embedded: there is nothing to build or
// install.
package ui
