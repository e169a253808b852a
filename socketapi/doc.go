// Package socketapi is the agent's local API: HTTP/1.1 over a Unix socket,
// JSON bodies, every route under /v1/, so `curl --unix-socket` works.
//
// # Listening
//
// The server creates the socket's parent directory, dials the path first and
// refuses to start when a live agent answers ("another agent is serving
// SOCKET"), removes only a dead socket file (never a file of another kind),
// listens, and chmods the socket 0660: the owner and group may connect,
// nobody else. On a clean shutdown it removes the socket file it created.
//
// # Who is calling
//
// The caller's identity comes from the kernel, never from a request body:
// SO_PEERCRED is read once per connection and the pid's start time with it.
//
//   - A worker's marker is "<host>-<pid>" with the agent's host name and the
//     kernel's pid. A worker may write, renew or release only a claim the
//     agent holds for that marker AND for the process whose start time was
//     recorded when the claim was granted: a reused pid owns nothing.
//   - A peer in a pid namespace the agent cannot see has pid 0. In pid
//     liveness mode it is refused with 403 naming the fix: share the pid
//     namespace with the agent (shareProcessNamespace: true / pid:
//     service:...) or run the agent with liveness: keepalive. In keepalive
//     mode it identifies itself with the header
//     "Leasekeeper-Worker: <host>-<pid>" (host and pid in its own
//     namespace), recorded as the marker "<host>~pidns-<pid>" so the
//     agent's pid sweeps never probe that pid in the agent's namespace.
//     THIS IDENTITY IS SELF-DECLARED: any process that can open the socket
//     can send any header, so across namespaces the socket's file mode is
//     the only access control, and such claims carry no start time.
//   - Operator verbs need an allowed uid (Config.Operators; default root
//     and the agent's own uid). Events record the actor as "uid:N".
//   - Reads are open to any peer that could connect.
//
// Requests carrying Origin or Referer are refused (403): a browser can be
// made to reach a local socket through a forwarding proxy, and only
// browsers send those headers. Bodies are capped (1 MiB by default, 413),
// must be valid UTF-8 (400 invalid_argument: encoding/json would otherwise
// replace the bytes with U+FFFD and store a name nobody sent), are decoded
// strictly (unknown fields and trailing data are 400), and headers must
// arrive within 5 s.
//
// Every name a request carries — card and run ids in the path, the state
// of a listing in the query, ids, states, labels, reasons and the like in
// the body — is checked with the board's rules (input.go) before anything
// reaches the store, for reads as for writes: not UTF-8, NUL or another
// control character, surrounding whitespace, over the length limit are
// 400 invalid_argument. Reads are open to any peer, and the store may run
// behind a process boundary that such a name must never reach.
//
// # Errors
//
// Every error, including unknown routes (404) and wrong methods (405), is
// JSON: {"error": "...", "code": "..."}; a claim_conflict also carries
// "card", "holder" (empty: the card is free) and "epoch".
//
//	code                 status  meaning
//	not_found            404     card, run or route does not exist
//	claim_conflict       409     held by another marker, or the token is stale
//	transition_rejected  409     the board does not allow the move
//	terminal_state_exit  409     leaving a terminal state: use reopen
//	waiting_on_blockers  409     a claim by id of a card waiting on its blockers (named)
//	already_exists       409     a card with that id exists
//	invalid_argument     400     malformed input: a bad name, a body that is not UTF-8, or what the store refused
//	bad_request          400/405 malformed request, unknown route method
//	too_large            413     body over the cap
//	unauthorized         401     the agent cannot tell who is calling
//	forbidden            403     names another's live claim, reused pid, not an operator, Origin/Referer
//	outcome_unknown      502     the store cannot say whether the write landed (never for a read)
//	unavailable          503     shutting down (no new claims), no reaper, a read the store did not answer
//	internal             500     anything else
//
// # Worker routes
//
// The marker is always the caller's own; bodies carry the epoch only.
//
//	POST   /v1/claims                        {"card": ID} or {"next": true}
//	    → 200 ClaimResponse {card, token, lease_ms, trusted_ms, liveness, ping_ms}
//	    claim one card, or the oldest unclaimed card in a pool state
//	    (not_found when none). A named card waiting in waiting_deps on its
//	    blockers is waiting_on_blockers. Re-claiming a card the caller holds refreshes
//	    the lease (same epoch); re-claiming one the agent reported lost to it
//	    (or did not adopt at boot) is a fresh acquisition at a higher epoch.
//	    503 once the agent is shutting down.
//	DELETE /v1/claims/{card}?epoch=N         → 204; release (ReleaseOwned; a free card is 204 too)
//	PUT    /v1/claims/{card}/state           {"epoch", "to", "from"?, "reason"?}
//	    → 200 {"changed"}; fenced move; reason empty, run_finished or run_failed
//	PUT    /v1/claims/{card}/last-run        {"epoch", "run_id"} → 204
//	PUT    /v1/claims/{card}/awaiting-input  {"epoch", "awaiting_input"} → 204
//	PUT    /v1/claims/{card}/gave-up         {"epoch", "gave_up": {...}|null} → 204
//	POST   /v1/claims/{card}/runs            {"epoch", "id"?, "status"?, "checkpoint"?}
//	    → 201 Run; creates a run owned by the caller's token (owner, epoch,
//	    host, pid, pid start) and stamps the card's last_run_id with it.
//	PATCH  /v1/runs/{id}                     {"if_status"?, "status"?, "continuation"?,
//	                                          "checkpoint"?, "failure_code"?}
//	    → 200 Run; only the run's owner process, while it still holds the
//	    claim the run was started under; PROCESS_ORPHANED is the watchdog's.
//	POST   /v1/keepalive                     {} → 200 {"claims": [{card, epoch, trusted_ms}]}
//	    the keepalive ping (renewal depends on it in keepalive mode).
//	GET    /v1/watch?after=SEQ               → NDJSON frames (apitype.Frame)
//	    "hello" first (seq = the position; "missed": true when frames after
//	    SEQ are no longer buffered, or SEQ is ahead of this agent), then
//	    "claim_lost" {card, epoch, marker, reason} for the caller's claims,
//	    "launch" {card, state} hints (produced by the agent's effects layer
//	    from the store's event log, never for machine-reason events), and a
//	    "ping" every lease/3 listing the caller's claims with trusted_ms,
//	    the time the agent still trusts each lease, relative, so the two
//	    processes' clocks need not agree, and stream_ms, how long after
//	    receiving the watch request the agent measured them: the worker
//	    counts trusted_ms from its send time of the request + stream_ms,
//	    never from the frame's (possibly late) receipt.
//	    Without ?after the stream starts from now.
//
// # Reads (any peer)
//
//	GET /v1/cards?state=S&limit=N&claimed=true → 200 {"cards": [Card]}
//	GET /v1/cards/{id}                         → 200 Card
//	GET /v1/runs?card=ID&status=S&limit=N      → 200 {"runs": [Run]}
//	    newest first; one card's runs, or every card's (one store read
//	    per run: the store has no listing of runs)
//	GET /v1/runs/{id}                          → 200 Run
//	GET /v1/status                             → 200 apitype.Status
//	GET /v1/board                              → 200 apitype.BoardResponse
//	    {states: [{name, pool, launch, running, terminal, completion}],
//	    running, first_pool, completion, failed}: the board as stored now
//	    (a state sweep may have changed it), so clients route cards by its
//	    real columns.
//	GET /v1/events?after=SEQ&limit=N           → 200 {"events": [Event]}
//	GET /v1/events?after=SEQ&follow=true       → NDJSON, one Event per line
//	    (a positive after below what retention pruned: 410 events_pruned)
//	GET /v1/events/head                        → 200 {"seq": N}
//	    the log's last sequence number now (0: empty); follow after it to
//	    see every later event and none before (a waiter's start position).
//
// # Operator routes (allowed uids)
//
//	POST   /v1/cards                 board.CreateCardParams → 201 Card (actor from the kernel)
//	PUT    /v1/cards/{id}/state      {"to", "reason"?} → 200 Card (SetState; sinks refuse)
//	POST   /v1/cards/{id}/reopen     {"to", "reason"?} → 200 Card (the one exit from a sink)
//	PATCH  /v1/cards/{id}/labels     {"add": [...], "remove": [...]} → 200 Card (relative)
//	PUT    /v1/cards/{id}/labels     {"labels": [...]} → 200 Card (absolute)
//	DELETE /v1/cards/{id}/claim      → 200 {"card", "holder", "epoch"}: force-release;
//	    the holder's watch stream gets claim_lost (reason force_released)
//	DELETE /v1/cards/{id}?force=true → 200 apitype.DeleteCardResponse: the card
//	    and its runs (retention.go; force force-releases a claimed card first)
//	POST   /v1/prune                 apitype.PruneRequest → 200 apitype.PruneResponse
//	POST   /v1/reaper/pass?dry_run=true → 200 apitype.ReaperPass
//
// Board administration (operator; admin.go). Each runs one sweep of
// package boardadmin and answers 200 board.SweepReport {op, cards,
// changed, unchanged, gone, contended, board, notes}; cards still contended
// after every attempt are in the report, not an error (DESIGN.md#label-sweeps).
// ?dry_run=true decides and writes nothing (the report's dry_run set);
// ?progress=true answers NDJSON apitype.SweepFrame lines instead: progress
// every 100 cards and at the last, then the report (or an error frame).
//
//	POST   /v1/board/states/rename   {"from", "to"}
//	POST   /v1/board/states/delete   {"state", "into"} (a bulk reopen while a
//	    dependent is outside waiting_deps is 409 transition_rejected and
//	    changes nothing)
//	POST   /v1/board/labels/rename   {"from", "to"}
//	POST   /v1/board/labels/merge    {"from": [...], "into"}
//	POST   /v1/board/labels/delete   {"label"}
//
// Machine reasons (watchdog, state_rename, ...) are refused on every route:
// they silence effects, and only the machine may write them (DESIGN.md#machine-reasons).
package socketapi
