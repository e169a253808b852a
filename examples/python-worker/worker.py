#!/usr/bin/env python3
"""An example leasekeeper worker in Python, standard library only.

It speaks the agent's socket API directly (HTTP/1.1 over a Unix socket, JSON
bodies; see docs/API.md), so it is also a reference for writing a worker in
any language:

1. Open the watch stream (GET /v1/watch) BEFORE claiming, so a claim_lost
   pushed right after the grant cannot be missed.
2. Start the oldest claimable card (POST /v1/starts {"next": true}): the
   claim, its run and the move into the running column, in one atomic
   write. When the card records a run without a final verdict (one left
   resumable, or one whose claim an operator broke), the local bbolt store
   resumes that run instead ("resumed": true): same run id, and its
   checkpoint tells the worker where the work stopped.
3. Work, while watching for either of the two reasons to stop at once:
   a claim_lost frame for this card and epoch, or the time the agent last
   said it trusts the lease running out (every ping frame carries it as
   trusted_ms). The second one matters: the watchdog may declare the run
   orphaned once the lease has expired, and that is only safe because every
   holder stops by its lease deadline on its own, even when it can no longer
   hear the agent.
4. Finish (POST /v1/claims/{card}/finish): the run's verdict, the card
   filed by the board (finished: the completion state; failed: failed;
   failed_resumable: back to the pool) and the claim released, in one
   fenced write. A claim_conflict answer means the claim was lost before
   the verdict landed, and then none of it was written.
5. When the hello frame says the agent runs in keepalive liveness mode,
   POST /v1/keepalive every ping_ms: the agent then renews a claim only
   while its holder pings.

A worker that stopped because its claim ended sends its verdict one last
time, bounded: the fence, not the worker, knows whether the claim is over.
After a claim_lost it is refused and writes nothing; after the worker
stopped because the agent went quiet, the agent may still hold the claim,
and then the card goes back to the pool with the progress made.

The agent learns who is calling from the kernel (SO_PEERCRED): the claim's
marker is "<host>-<pid>" of THIS process, so every request must come from
it. Bodies carry the epoch only.

The "work" is a wait of --work seconds; a card labelled "fail" stands for
work that fails. Progress is kept as the run's checkpoint ("worked-ms=N"):
a resumed run only waits what is left. SIGTERM / SIGINT stop the work and
finish the run as failed_resumable at the progress made, which hands the
card back to the pool for the next start to resume.

With --label L (repeatable) the worker starts only cards carrying every
such label ({"next": true, "labels": [...]}): a GPU worker passes --label gpu.

With --wait an empty pool does not end the worker: it waits for new work,
woken by the agent's event log, not by asking again and again (docs/API.md,
"Waiting"; DESIGN.md#waiting). The order is what makes it race-free:

1. read the log's head: GET /v1/events/head -> {"seq": N};
2. try the start; when nothing is claimable,
3. follow the log after that head (GET /v1/events?after=N&follow=true)
   and try again on each event that may have made a card claimable (a
   release, a move, a card created, a label change, a run update).

An event written between the try and the follow is numbered above the
head, so the follow delivers it. A re-try every 30 s is a backstop for a
change no event announces, not the wake-up.

Usage: worker.py [--socket PATH] [--work SECONDS] [--max N] [--label L]... [--wait]
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

# Bounds the verdict sent after the claim ended: the agent may be the reason
# it ended, and the worker must go on (or exit) even when the agent is frozen.
LATE_WRITE_TIMEOUT = 2

# Waiting for work (--wait): the events that may make a card claimable, and
# the interval of the safety re-try, a backstop for a change no event
# announces (DESIGN.md#waiting).
WAKE_TYPES = ("released", "state", "card_created", "labels", "run_updated")
WAIT_BACKSTOP = 30

# The checkpoints this worker records: how much of the work is behind the run.
CHECKPOINT_PREFIX = "worked-ms="


def checkpoint(worked):
    return "%s%d" % (CHECKPOINT_PREFIX, int(worked * 1000))


def worked_so_far(cp):
    """Seconds of work a checkpoint of this worker records; any other (a run
    started by another program) means the work starts over."""
    if not cp or not cp.startswith(CHECKPOINT_PREFIX):
        return 0.0
    try:
        return max(int(cp[len(CHECKPOINT_PREFIX):]), 0) / 1000.0
    except ValueError:
        return 0.0


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


class LogFollower(threading.Thread):
    """Follows the event log (GET /v1/events?after=SEQ&follow=true) from a
    head read before the try it backs, and sets `woken` on each event that
    may have made a card claimable. A broken stream is resumed after the
    last event read: the log is the store's, so nothing is skipped. A
    refused one starts over from a fresh head, and wakes a try."""

    def __init__(self, agent, after):
        super().__init__(daemon=True)
        self.agent, self.after = agent, after
        self.woken = threading.Event()
        self.closed = threading.Event()
        self.lock = threading.Lock()
        self.conn = None

    def run(self):
        backoff = 0.1
        while not self.closed.is_set():
            try:
                self.follow()
                backoff = 0.1
            except AgentError as e:
                if e.code != "unavailable":
                    # The agent refuses this position (the log pruned past
                    # it, say): start over from a fresh head, and have the
                    # worker try after reading it, as at the start.
                    try:
                        self.after = self.agent.request("GET", "/v1/events/head")["seq"]
                        self.woken.set()
                    except (OSError, http.client.HTTPException, ValueError, AgentError):
                        pass
            except (OSError, http.client.HTTPException, ValueError):
                pass  # the agent is restarting: resume after the last event read
            if self.closed.wait(backoff):
                return
            backoff = min(backoff * 2, 3.0)

    def follow(self):
        conn = UnixHTTPConnection(self.agent.path, timeout=None)
        with self.lock:
            if self.closed.is_set():
                return
            self.conn = conn
        try:
            conn.request("GET", "/v1/events?" + urllib.parse.urlencode({"after": self.after, "follow": "true"}),
                         headers={"Leasekeeper-Worker": self.agent.identity})
            resp = conn.getresponse()
            if resp.status != 200:
                raise AgentError(resp.status, json.loads(resp.read() or b"{}"))
            while True:
                line = resp.readline()
                if not line:
                    return
                ev = json.loads(line)
                self.after = ev.get("seq", self.after)
                if ev.get("type") in WAKE_TYPES:
                    self.woken.set()
        finally:
            conn.close()

    def close(self):
        with self.lock:
            self.closed.set()
            if self.conn is not None and self.conn.sock is not None:
                try:
                    self.conn.sock.shutdown(socket.SHUT_RDWR)  # ends the blocked read
                except OSError:
                    pass


class Worker:
    def __init__(self, agent, watch, work, out, labels=(), wait=False):
        self.agent, self.watch, self.work = agent, watch, work
        self.labels = list(labels)
        self.wait = wait
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
                # The checkpoint marks the run resumable: should this process
                # die, the watchdog returns the card to the pool rather than
                # failing it. A resumed run keeps its own checkpoint.
                body = {"next": True, "checkpoint": checkpoint(0)}
                if self.labels:
                    body["labels"] = self.labels
                if self.wait:
                    started, sent = self.start_waiting(body)
                    if started is None:
                        return 0  # stopped by a signal while waiting: nothing claimed
                else:
                    started = self.agent.request("POST", "/v1/starts", body)
            except AgentError as e:
                if e.code == "not_found":
                    self.say("pool empty: nothing left to claim")
                    return 0
                if e.code == "claim_conflict":
                    continue  # another worker won the card; nothing was written: ask again
                raise
            if self.handle(started, sent) == "interrupted":
                return 0
        return 0

    def start_waiting(self, body):
        """POST /v1/starts, waiting while nothing is claimable: the log's
        head first, then the try, then a follow of the log after the head,
        trying again on each event that may matter (DESIGN.md#waiting).
        Returns (started, sent), or (None, None) when a signal ended the
        wait."""
        head = self.agent.request("GET", "/v1/events/head")["seq"]
        follower = None
        try:
            while True:
                sent = time.monotonic()
                try:
                    return self.agent.request("POST", "/v1/starts", body), sent
                except AgentError as e:
                    if e.code == "claim_conflict":
                        continue  # the pick changed under the write: at once
                    if e.code != "not_found":
                        raise
                if follower is None:
                    self.say("pool empty: waiting for work")
                    follower = LogFollower(self.agent, head)
                    follower.start()
                # Until an event, the backstop or a signal (the flag is
                # looked at every 0.1 s, as while working).
                backstop = time.monotonic() + WAIT_BACKSTOP
                while not self.stop.is_set() and not follower.woken.wait(min(0.1, max(backstop - time.monotonic(), 0))):
                    if time.monotonic() >= backstop:
                        break
                if self.stop.is_set():
                    return None, None
                # Cleared BEFORE the next try: an event after it sets it
                # again, one before it is seen by the try.
                follower.woken.clear()
        finally:
            if follower is not None:
                follower.close()

    def trusted_left(self):
        # A holder's request may not outlive the lease the agent last
        # vouched for: an agent that hangs mid-request must not keep this
        # holder past its deadline, which the watchdog's orphan proof counts on.
        left = self.watch.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("lease no longer trusted: no word from the agent")
        return min(left, 30)

    def finish(self, status, failure_code="", progress=None, timeout=None):
        """POST /v1/claims/{card}/finish: verdict, filing and release."""
        body = {"epoch": self.epoch, "run_id": self.run_id, "status": status}
        if failure_code:
            body["failure_code"] = failure_code
        if progress is not None:
            body["checkpoint"] = checkpoint(progress)
        return self.agent.request("POST", "/v1/claims/" + urllib.parse.quote(self.card, safe="") + "/finish",
                                  body, timeout=self.trusted_left() if timeout is None else timeout)

    def handle(self, started, sent):
        card, token, run = started["card"], started["token"], started["run"]
        self.card, self.epoch, self.run_id = card["id"], token["epoch"], run["id"]
        self.watch.hold(self.card, self.epoch, started["trusted_ms"], sent)
        if started.get("resumed"):
            self.say("claimed %s at epoch %d as %s; resumed run %s at checkpoint %s"
                     % (self.card, self.epoch, token["marker"], self.run_id, json.dumps(run.get("checkpoint", ""))))
        else:
            self.say("claimed %s at epoch %d as %s; started run %s" % (self.card, self.epoch, token["marker"], self.run_id))
        self.worked = worked_so_far(run.get("checkpoint"))
        try:
            return self.handle_started(card)
        except AgentError as e:
            if e.code == "claim_conflict":
                # The fence refused the Finish: someone else holds the card
                # now, and none of the verdict, filing or release happened.
                self.say("claim on %s lost before its verdict landed (refused, nothing written): %s" % (self.card, e))
                return "lost"
            raise
        except TimeoutError:
            # The agent did not answer before the trusted deadline: stop.
            self.say("claim on %s lost: %s; stopped" % (self.card, UNTRUSTED))
            self.late_verdict()
            return "lost"
        finally:
            self.watch.drop()

    def handle_started(self, card):
        # The work: wake on the end of the work, a lost claim, or a signal.
        left = max(self.work - self.worked, 0)
        began = time.monotonic()
        end = began + left
        lost = None
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= end:
                break
            lost = self.watch.wait_lost(min(end - now, 0.1))
            if lost:
                break
        self.worked += min(time.monotonic() - began, left)
        if lost:
            # Stop now: the watchdog counts on the holder stopping.
            self.say("claim on %s lost while working: %s; stopped" % (self.card, lost))
            self.late_verdict()
            return "lost"
        if self.stop.is_set():
            f = self.finish("failed_resumable", "INTERRUPTED", self.worked)
            self.say("interrupted: %s handed back to the pool in %s; run %s resumable at checkpoint %s"
                     % (self.card, f["card"]["state"], self.run_id, json.dumps(f["run"].get("checkpoint", ""))))
            return "interrupted"

        # The board files the card as the watchdog would file a dead owner's.
        if "fail" in (card.get("labels") or []):
            f = self.finish("failed", "WORK_FAILED")
        else:
            f = self.finish("finished")
        self.say("%s: run %s %s, card filed to %s" % (self.card, self.run_id, f["run"]["status"], f["card"]["state"]))
        return "filed"

    def late_verdict(self):
        # The verdict of a claim that ended on this side, sent once. Whether
        # the claim is over at the agent is the fence's to say: after a
        # claim_lost the agent already let it go (a force-release closed the
        # run resumable itself), so the Finish is refused and writes nothing;
        # when this worker stopped because the agent went quiet, the agent
        # may still hold the claim, and then the card goes back to the pool
        # with the progress made. A fresh short timeout, not the expired
        # deadline: the agent may be the reason the claim ended.
        try:
            f = self.finish("failed_resumable", "CLAIM_LOST", self.worked, timeout=LATE_WRITE_TIMEOUT)
            self.say("late verdict on %s landed: card back in %s, run %s resumable" % (self.card, f["card"]["state"], self.run_id))
            return
        except AgentError as e:
            if e.code == "claim_conflict":
                self.say("late verdict on %s refused by the fence, nothing written: %s" % (self.card, e))
                return
            err = e
        except (OSError, http.client.HTTPException, ValueError) as e:
            err = e
        self.say("late verdict on %s not answered: %s" % (self.card, err))
        self.give_back()

    def give_back(self):
        # A claim this worker gave up by itself, and whose late verdict got
        # no answer, is handed back, best effort and bounded: the agent may
        # not know the worker stopped (in pid mode it renews a claim for as
        # long as the pid lives) and would keep the card held for nobody. A
        # fresh timeout, not the expired deadline; the fence makes a stale
        # release harmless.
        try:
            self.agent.request("DELETE", "/v1/claims/" + urllib.parse.quote(self.card, safe=""),
                               query={"epoch": self.epoch}, timeout=5)
        except (OSError, http.client.HTTPException, ValueError, AgentError):
            pass  # the agent is gone or hung: its own rules end the claim


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
    p.add_argument("--label", action="append", default=[], help="start only cards carrying this label (repeatable: all of them)")
    p.add_argument("--wait", action="store_true", help="when the pool is empty, wait for new work instead of exiting")
    args = p.parse_args()

    agent = Agent(args.socket)
    watch = Watch(agent)
    watch.start()
    if not watch.ready.wait(30) or watch.error is not None:
        print("python-worker: cannot open the watch stream at %s: %s" % (args.socket, watch.error), file=sys.stderr)
        return 1
    w = Worker(agent, watch, args.work, sys.stdout, args.label, args.wait)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: w.stop.set())
    try:
        return w.loop(args.max)
    except (AgentError, OSError) as e:
        print("python-worker: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
