#!/usr/bin/env python3
"""An example leasekeeper worker in Python, standard library only.

It speaks the agent's socket API directly (HTTP/1.1 over a Unix socket, JSON
bodies; see docs/API.md), so it is also a reference for writing a worker in
any language:

1. Open the watch stream (GET /v1/watch) BEFORE claiming, so a claim_lost
   pushed right after the grant cannot be missed.
2. Claim the oldest claimable card (POST /v1/claims {"next": true}).
3. Record a run (POST /v1/claims/{card}/runs) and move the card into the
   running column (PUT /v1/claims/{card}/state).
4. Work, while watching for either of the two reasons to stop at once:
   a claim_lost frame for this card and epoch, or the time the agent last
   said it trusts the lease running out (every ping frame carries it as
   trusted_ms). The second one matters: the watchdog may declare the run
   orphaned once the lease has expired, and that is only safe because every
   holder stops by its lease deadline on its own, even when it can no longer
   hear the agent (ADR-096 section 2).
5. Record the run's verdict (PATCH /v1/runs/{id}), file the card
   (PUT .../state with reason run_finished or run_failed) and release the
   claim (DELETE /v1/claims/{card}?epoch=N).
6. When the hello frame says the agent runs in keepalive liveness mode,
   POST /v1/keepalive every ping_ms: the agent then renews a claim only
   while its holder pings.

The agent learns who is calling from the kernel (SO_PEERCRED): the claim's
marker is "<host>-<pid>" of THIS process, so every request must come from
it. Bodies carry the epoch only.

The "work" is a wait of --work seconds; a card labelled "fail" stands for
work that fails. SIGTERM / SIGINT stop the work, record the run as
failed_resumable and hand the card back to the pool.

Usage: worker.py [--socket PATH] [--work SECONDS] [--max N]
"""

import argparse
import http.client
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse


class AgentError(Exception):
    """An error answer of the agent: {"error": ..., "code": ...}."""

    def __init__(self, status, body):
        self.status = status
        self.code = body.get("code", "")
        self.body = body
        super().__init__("agent: %s (%s, HTTP %d)" % (body.get("error", ""), self.code, status))


# Why a claim ended, when this worker ends it by itself. Such a claim is
# handed back (Worker.give_back): the agent may not know the worker stopped.
UNTRUSTED = "lease no longer trusted: no word from the agent"
LOST_AT_GRANT = "reported lost as it was granted"


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over AF_UNIX: the host name is a placeholder."""

    def __init__(self, path, timeout=None):
        super().__init__("leasekeeper", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class Agent:
    def __init__(self, path):
        self.path = path
        # Read by the agent only when it cannot see this process's pid (a
        # foreign pid namespace) and runs in keepalive mode; see docs/API.md.
        self.identity = "%s-%d" % (socket.gethostname(), os.getpid())

    def request(self, method, path, body=None, query=None, timeout=30):
        if query:
            path += "?" + urllib.parse.urlencode(query)
        conn = UnixHTTPConnection(self.path, timeout=timeout)
        try:
            headers = {"Leasekeeper-Worker": self.identity}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            if resp.status >= 300:
                try:
                    err = json.loads(raw)
                except ValueError:
                    err = {"error": raw.decode(errors="replace")}
                raise AgentError(resp.status, err)
            return json.loads(raw) if raw else None
        finally:
            conn.close()


class Watch(threading.Thread):
    """Follows GET /v1/watch and tracks the current claim's fate.

    The stream sends a hello, then claim_lost / launch frames, and a ping
    every lease/3 listing this process's claims with trusted_ms: how long
    the agent still trusts each lease, counted from when it measured the
    frame — stream_ms after it received the watch request, so from this
    process's send time of that request plus stream_ms, never from the
    frame's (possibly late) receipt. The deadline is kept on this process's
    monotonic clock, so the two processes' wall clocks never need to agree.
    """

    def __init__(self, agent):
        super().__init__(daemon=True)
        self.agent = agent
        self.ready = threading.Event()
        self.changed = threading.Condition()
        self.after = -1  # resume position
        self.card = None
        self.epoch = 0
        self.deadline = 0.0
        self.lost_reason = None
        self.lost = {}  # card -> epoch of claim_lost frames seen, for a frame racing the grant
        self.error = None
        self.pinger = None

    def hold(self, card, epoch, trusted_ms, sent_at):
        with self.changed:
            self.card, self.epoch = card, epoch
            self.deadline = sent_at + trusted_ms / 1000.0
            self.lost_reason = None
            if self.lost.get(card) == epoch:
                self.lost_reason = LOST_AT_GRANT
            self.changed.notify_all()

    def drop(self):
        with self.changed:
            self.card, self.epoch = None, 0

    def lose(self, reason):
        with self.changed:
            if self.lost_reason is None:
                self.lost_reason = reason
            self.changed.notify_all()

    def wait_lost(self, timeout):
        """Waits up to timeout seconds; returns why the claim ended, or None."""
        end = time.monotonic() + timeout
        with self.changed:
            while True:
                if self.lost_reason is not None:
                    return self.lost_reason
                now = time.monotonic()
                if self.card is not None and now >= self.deadline:
                    self.lost_reason = UNTRUSTED
                    return self.lost_reason
                if now >= end:
                    return None
                wake = end if self.card is None else min(end, self.deadline)
                self.changed.wait(wake - now)

    def run(self):
        backoff = 0.05
        while True:
            try:
                self.follow()
            except (OSError, http.client.HTTPException, ValueError, AgentError) as e:
                if not self.ready.is_set():
                    self.error = e
                    self.ready.set()
                    return
            # The stream broke: the current claim keeps counting down to the
            # deadline the agent last vouched for; reconnect and resume.
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def follow(self):
        query = "" if self.after < 0 else "?after=%d" % self.after
        conn = UnixHTTPConnection(self.agent.path, timeout=None)
        try:
            # Taken before the request goes out, so before the agent gets
            # it: pings count their trusted times from here (see trust).
            sent = time.monotonic()
            conn.request("GET", "/v1/watch" + query, headers={"Leasekeeper-Worker": self.agent.identity})
            resp = conn.getresponse()
            if resp.status != 200:
                raise AgentError(resp.status, json.loads(resp.read() or b"{}"))
            while True:
                line = resp.readline()
                if not line:
                    return
                received = time.monotonic()
                frame = json.loads(line)
                self.on_frame(frame, received, sent)
                self.after = frame.get("seq", self.after)
        finally:
            conn.close()

    def on_frame(self, f, received, sent):
        kind = f.get("type")
        if kind == "hello":
            if f.get("missed") and self.after >= 0:
                # Frames may have been lost (the agent restarted or this
                # reader fell behind): check the claim against the board.
                threading.Thread(target=self.verify, daemon=True).start()
            if f.get("liveness") == "keepalive" and self.pinger is None and f.get("ping_ms"):
                # In keepalive mode the agent renews a claim only while its
                # holder pings: a hung worker stops pinging and loses it.
                self.pinger = threading.Thread(target=self.ping, args=(f["ping_ms"] / 1000.0,), daemon=True)
                self.pinger.start()
            self.ready.set()
        elif kind == "claim_lost":
            with self.changed:
                self.lost[f.get("card")] = f.get("epoch")
                mine = f.get("card") == self.card and f.get("epoch") == self.epoch
            if mine:
                self.lose("claim lost: %s" % f.get("reason"))
        elif kind == "ping":
            # Count from an instant no later than the agent's measurement:
            # the stream's send time plus the stream's age at the
            # measurement (stream_ms). The receipt may come any time later
            # (this process was stopped, the socket buffer held the frame),
            # and counting from it would stretch the deadline past the
            # agent's. Worker and agent share the host's monotonic clock;
            # an agent that predates stream_ms leaves the receipt.
            at = received
            if f.get("stream_ms") is not None:
                at = min(received, sent + f["stream_ms"] / 1000.0)
            self.trust(f.get("claims"), at)

    def trust(self, claims, at):
        with self.changed:
            for c in claims or []:
                if c.get("card") == self.card and c.get("epoch") == self.epoch:
                    # A deadline already passed is never revived.
                    if time.monotonic() < self.deadline:
                        self.deadline = at + c.get("trusted_ms", 0) / 1000.0
            self.changed.notify_all()

    def ping(self, every):
        while True:
            sent = time.monotonic()
            try:
                resp = self.agent.request("POST", "/v1/keepalive", {}, timeout=every)
                # Counted from the send time: a sound bound on the trust.
                self.trust(resp.get("claims"), sent)
            except (AgentError, OSError, ValueError):
                pass  # the deadline still bounds the claim
            time.sleep(max(every - (time.monotonic() - sent), 0))

    def verify(self):
        card, epoch = self.card, self.epoch
        if card is None:
            return
        try:
            c = self.agent.request("GET", "/v1/cards/" + urllib.parse.quote(card, safe=""))
        except AgentError as e:
            if e.code == "not_found":
                self.lose("card is gone")
            return
        except OSError:
            return  # cannot tell; the deadline still bounds the claim
        if c.get("claim_epoch") != epoch or not c.get("claim"):
            self.lose("card is now held by %r at epoch %s" % (c.get("claim"), c.get("claim_epoch")))


class Worker:
    def __init__(self, agent, watch, work, running, done, failed, out):
        self.agent, self.watch, self.work = agent, watch, work
        self.running, self.done, self.failed = running, done, failed
        self.out = out
        self.stop = threading.Event()

    def say(self, msg):
        print(msg, file=self.out, flush=True)

    def loop(self, max_cards):
        n = 0
        while not self.stop.is_set() and (max_cards == 0 or n < max_cards):
            n += 1
            sent = time.monotonic()
            try:
                grant = self.agent.request("POST", "/v1/claims", {"next": True})
            except AgentError as e:
                if e.code == "not_found":
                    self.say("pool empty: nothing left to claim")
                    return 0
                if e.code == "claim_conflict":
                    continue  # another worker won the card: ask again
                raise
            if self.handle(grant, sent) == "interrupted":
                return 0
        return 0

    def trusted_left(self):
        # A holder's request may not outlive the lease the agent last
        # vouched for: an agent that hangs mid-request must not keep this
        # holder past its deadline, which the watchdog's orphan proof counts on.
        left = self.watch.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("lease no longer trusted: no word from the agent")
        return min(left, 30)

    def owned(self, method, suffix, body=None, query=None):
        return self.agent.request(method, "/v1/claims/" + urllib.parse.quote(self.card, safe="") + suffix,
                                  body, query, timeout=self.trusted_left())

    def handle(self, grant, sent):
        card, token = grant["card"], grant["token"]
        self.card, self.epoch = card["id"], token["epoch"]
        self.watch.hold(self.card, self.epoch, grant["trusted_ms"], sent)
        self.say("claimed %s at epoch %d as %s" % (self.card, self.epoch, token["marker"]))
        try:
            return self.handle_claimed(card)
        except AgentError as e:
            if e.code == "claim_conflict":
                # The fence refused a write: someone else holds the card now.
                self.say("claim on %s lost: %s" % (self.card, e))
                return "lost"
            raise
        except TimeoutError:
            # The agent did not answer before the trusted deadline: stop
            # and write nothing more.
            self.say("claim on %s lost: %s; stopped" % (self.card, UNTRUSTED))
            self.give_back()
            return "lost"
        finally:
            self.watch.drop()

    def handle_claimed(self, card):
        run = self.owned("POST", "/runs", {"epoch": self.epoch})
        if card["state"] != self.running:
            self.owned("PUT", "/state", {"epoch": self.epoch, "to": self.running})
        self.say("working on %s (run %s)" % (self.card, run["id"]))

        # The work: wake on the end of the work, a lost claim, or a signal.
        end = time.monotonic() + self.work
        lost = None
        while not self.stop.is_set():
            left = end - time.monotonic()
            if left <= 0:
                break
            lost = self.watch.wait_lost(min(left, 0.1))
            if lost:
                break
        if lost:
            # Stop now and write nothing more: any write would be refused by
            # the fence, and the watchdog counts on the holder stopping.
            self.say("claim on %s lost while working: %s; stopped" % (self.card, lost))
            if lost in (UNTRUSTED, LOST_AT_GRANT):
                self.give_back()
            return "lost"
        if self.stop.is_set():
            self.close_run(run["id"], "failed_resumable")
            self.owned("DELETE", "", query={"epoch": self.epoch})
            self.say("interrupted: %s handed back to the pool" % self.card)
            return "interrupted"

        # Route the card as the watchdog would route a dead owner's.
        if "fail" in (card.get("labels") or []):
            status, target, reason = "failed", self.failed, "run_failed"
        else:
            status, target, reason = "finished", self.done, "run_finished"
        self.close_run(run["id"], status)
        self.owned("PUT", "/state", {"epoch": self.epoch, "to": target, "reason": reason})
        self.owned("DELETE", "", query={"epoch": self.epoch})
        self.say("%s: run %s %s, card filed to %s" % (self.card, run["id"], status, target))
        return "filed"

    def give_back(self):
        # A claim this worker gives up by itself (its trusted deadline passed,
        # or the agent reported its epoch lost as it granted it) is handed
        # back, best effort and bounded: the agent may not know the worker
        # stopped (in pid mode it renews a claim for as long as the pid
        # lives) and would keep the card held for nobody. A fresh timeout,
        # not the expired deadline; the fence makes a stale release harmless.
        try:
            self.agent.request("DELETE", "/v1/claims/" + urllib.parse.quote(self.card, safe=""),
                               query={"epoch": self.epoch}, timeout=5)
        except (OSError, http.client.HTTPException, ValueError, AgentError):
            pass  # the agent is gone or hung: its own rules end the claim

    def close_run(self, run_id, status):
        # Compare-and-set on running, so a verdict the watchdog already
        # wrote is never overwritten.
        self.agent.request("PATCH", "/v1/runs/" + urllib.parse.quote(run_id, safe=""),
                           {"if_status": "running", "status": status}, timeout=self.trusted_left())


def default_socket():
    if os.environ.get("LEASEKEEPER_SOCKET"):
        return os.environ["LEASEKEEPER_SOCKET"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "leasekeeper", "leasekeeper.sock")
    return "leasekeeper.sock"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--socket", default=default_socket(), help="agent socket (default: LEASEKEEPER_SOCKET or the runtime directory)")
    p.add_argument("--work", type=float, default=2.0, help="seconds of simulated work per card")
    p.add_argument("--max", type=int, default=0, help="stop after this many claimed cards (0: until the pool is empty)")
    p.add_argument("--running-state", default="in_progress")
    p.add_argument("--done-state", default="done")
    p.add_argument("--failed-state", default="failed")
    args = p.parse_args()

    agent = Agent(args.socket)
    watch = Watch(agent)
    watch.start()
    if not watch.ready.wait(30) or watch.error is not None:
        print("python-worker: cannot open the watch stream at %s: %s" % (args.socket, watch.error), file=sys.stderr)
        return 1
    w = Worker(agent, watch, args.work, args.running_state, args.done_state, args.failed_state, sys.stdout)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: w.stop.set())
    try:
        return w.loop(args.max)
    except (AgentError, OSError) as e:
        print("python-worker: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
