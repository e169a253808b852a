// The board's live updates. The server renders every part of the page
// (escaped by html/template); this script asks for the parts again when the
// agent's event stream says something changed, naming the parts it holds
// by their hashes, and replaces only the parts that changed: the columns'
// scroller is never replaced, so its scroll position stays, and a column
// that is replaced keeps its own scroll position and the focus. It keeps
// lease countdowns ticking, says when the agent cannot be reached, and
// runs the search as you type. It fetches nothing but this server's own
// routes.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var link = document.getElementById("link");
  var status = document.getElementById("status");
  if (!live) { return; }
  var src = live.getAttribute("data-src");
  var refreshMS = parseInt(live.getAttribute("data-refresh-ms"), 10) || 0;
  // The server's clock at the render, and when (on the browser's monotonic
  // clock) it arrived: countdowns count from there.
  var serverNow = parseInt(live.getAttribute("data-now"), 10) || Date.now();
  var receivedAt = performance.now();
  var pending = null, inflight = false, again = false, timer = null;
  var agentDown = live.hasAttribute("data-down"), serverDown = false, linked = false;

  // The link reads "live" (green), "reconnecting…" (this server does not
  // answer) or "agent unreachable" (this server answers, the agent does
  // not): three states, three classes.
  function showLink() {
    if (!link) { return; }
    if (agentDown) {
      link.textContent = "agent unreachable"; link.className = "link down";
    } else if (serverDown || !linked) {
      link.textContent = serverDown ? "reconnecting…" : "connecting…"; link.className = "link bad";
    } else {
      link.textContent = "live"; link.className = "link ok";
    }
  }

  function setStatus(cls, html) {
    if (!status) { return; }
    if (!cls) {
      status.hidden = true; status.className = "status"; status.textContent = "";
      live.classList.remove("stale");
      return;
    }
    status.className = "status " + cls;
    status.textContent = "";
    status.appendChild(html);
    status.hidden = false;
    live.classList.add("stale");
  }
  function text(tag, t, cls) {
    var el = document.createElement(tag);
    el.textContent = t;
    if (cls) { el.className = cls; }
    return el;
  }
  function downMessage(msg, detail) {
    var f = document.createDocumentFragment();
    f.appendChild(text("b", "Agent unreachable."));
    f.appendChild(document.createTextNode(" "));
    f.appendChild(text("span", msg, "msg"));
    if (detail) {
      var d = document.createElement("details");
      d.appendChild(text("summary", "details"));
      d.appendChild(text("code", detail, "detail"));
      f.appendChild(document.createTextNode(" "));
      f.appendChild(d);
    }
    return f;
  }

  // Countdowns: the lease's end less the server's clock now.
  function fmt(ms) {
    var s = Math.round(Math.abs(ms) / 100) / 10;
    var txt = s >= 60 ? Math.floor(s / 60) + "m" + (s % 60).toFixed(1) + "s" : s.toFixed(1) + "s";
    return ms < 0 ? "expired " + txt + " ago" : txt + " left";
  }
  function tick() {
    var now = serverNow + (performance.now() - receivedAt);
    var els = document.querySelectorAll("[data-lease-until]");
    for (var i = 0; i < els.length; i++) {
      var left = parseInt(els[i].getAttribute("data-lease-until"), 10) - now;
      var t = fmt(left);
      if (els[i].textContent !== t) { els[i].textContent = t; }
      els[i].classList.toggle("expired", left < 0);
    }
  }

  // What in a part the focus is on, as a selector that finds it again in
  // the part's new rendering.
  function focusKey(el) {
    if (!el || el === document.body) { return null; }
    if (el.id) { return "#" + CSS.escape(el.id); }
    var href = el.getAttribute && el.getAttribute("href");
    var card = el.closest && el.closest("[data-card]");
    var sel = el.tagName.toLowerCase();
    if (href) { sel += '[href="' + CSS.escape(href) + '"]'; }
    if (el.hasAttribute("data-more")) { sel += "[data-more]"; }
    if (card) { sel = '[data-card="' + CSS.escape(card.getAttribute("data-card")) + '"] ' + sel; }
    return sel;
  }

  function held() {
    var hs = [];
    var els = live.querySelectorAll("[data-part]");
    for (var i = 0; i < els.length; i++) { hs.push(els[i].getAttribute("data-h")); }
    return hs;
  }

  function fromHTML(html) {
    var t = document.createElement("template");
    // Server-rendered HTML (html/template): every name in it is escaped.
    t.innerHTML = html;
    return t.content.firstElementChild;
  }

  // apply puts the answer's parts in place: a part whose hash the page
  // holds stays, untouched; a changed one is replaced; a part no longer
  // listed goes. False when the page lacks a place for a part (a page
  // rendered while the agent was down): the caller reloads it.
  function apply(ans) {
    serverNow = ans.now; receivedAt = performance.now();
    var old = {};
    var els = live.querySelectorAll("[data-part]");
    for (var i = 0; i < els.length; i++) { old[els[i].getAttribute("data-h")] = els[i]; }
    var active = document.activeElement, activePart = active && active.closest ? active.closest("[data-part]") : null;
    var focusSel = activePart ? focusKey(active) : null, focusPartKey = activePart ? activePart.getAttribute("data-part") : null;
    var bySlot = {}, order = [];
    (ans.parts || []).forEach(function (p) {
      if (!bySlot[p.in]) { bySlot[p.in] = []; order.push(p.in); }
      bySlot[p.in].push(p);
    });
    for (var s = 0; s < order.length; s++) {
      var slot = document.getElementById(order[s]);
      if (!slot) { return false; }
      var want = [];
      var ps = bySlot[order[s]];
      for (var j = 0; j < ps.length; j++) {
        var p = ps[j], el = old[p.h];
        if (!el) {
          if (!p.html) { return false; }
          el = fromHTML(p.html);
          // A changed part takes its predecessor's place (moving the
          // others would drop the focus and their scroll positions), and
          // keeps the scroll position of what scrolls in it.
          var prev = slot.querySelector(':scope > [data-part="' + CSS.escape(p.k) + '"]');
          if (prev) { keepScroll(prev, el); prev.replaceWith(el); }
        }
        want.push(el);
      }
      // Put want in order, inserting what is new and moving only what is
      // out of place (a column the board reordered).
      var cur = slot.firstElementChild;
      for (var k = 0; k < want.length; k++) {
        if (cur === want[k]) { cur = cur.nextElementSibling; continue; }
        slot.insertBefore(want[k], cur);
      }
      while (cur) { var next = cur.nextElementSibling; slot.removeChild(cur); cur = next; }
      restoreScroll(slot);
    }
    if (focusSel && !document.contains(active)) {
      var part = live.querySelector('[data-part="' + CSS.escape(focusPartKey) + '"]');
      var found = part && part.querySelector(focusSel);
      if (found && found.focus) { found.focus({ preventScroll: true }); }
    }
    return true;
  }
  var scrolls = [];
  function keepScroll(prev, el) {
    var a = prev.querySelectorAll(".cards"), b = el.querySelectorAll(".cards");
    for (var i = 0; i < a.length && i < b.length; i++) {
      if (a[i].scrollTop) { scrolls.push([b[i], a[i].scrollTop]); }
    }
  }
  function restoreScroll() {
    scrolls.forEach(function (s) { s[0].scrollTop = s[1]; });
    scrolls = [];
  }

  function updateURL() {
    var u = new URL(src, window.location.href);
    var q = new URLSearchParams(window.location.search);
    q.forEach(function (v, k) { u.searchParams.append(k, v); });
    u.searchParams.set("have", held().join("."));
    return u;
  }

  function refresh() {
    if (!src) { return; }
    if (inflight) { again = true; return; }
    inflight = true;
    fetch(updateURL().toString(), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        return r.text().then(function (t) {
          var a = null;
          try { a = JSON.parse(t); } catch (e) { a = { error: t.trim() || ("error " + r.status) }; }
          return { ok: r.ok, status: r.status, ans: a };
        });
      })
      .then(function (res) {
        serverDown = false;
        var a = res.ans;
        if (res.status === 401) {
          // This server no longer knows the page's cookie: it restarted
          // (a new token) or another browser's session is the one open.
          agentDown = false;
          setStatus("bad", text("span", "This page's session is over (leasekeeper ui restarted?): open the URL it printed last. " + (a.error || "")));
        } else if (a.down) {
          agentDown = true;
          setStatus("down", downMessage(a.down.message, a.down.detail));
        } else if (!res.ok) {
          agentDown = false;
          setStatus("bad", text("span", a.error || ("error " + res.status)));
        } else {
          agentDown = false;
          if (!apply(a)) { window.location.reload(); return; }
          setStatus(null);
          tick();
          live.setAttribute("data-rendered", String(Date.now()));
        }
        showLink();
      })
      .catch(function () {
        serverDown = true;
        setStatus("bad", text("span", "leasekeeper ui does not answer (stopped, or the network to it is down): the page shows what it last read."));
        showLink();
      })
      .then(function () {
        inflight = false;
        if (again) { again = false; refresh(); }
        schedule();
      });
  }
  // A change event refreshes soon; bursts are folded into one read.
  function soon() {
    if (pending) { return; }
    pending = setTimeout(function () { pending = null; refresh(); }, 50);
  }
  // Leases are renewed without an event: re-read on the agent's heartbeat
  // schedule as well, so a countdown shows the lease as renewed.
  function schedule() {
    if (timer) { clearTimeout(timer); }
    var ms = agentDown || serverDown ? 1000 : refreshMS;
    if (ms > 0) { timer = setTimeout(refresh, ms); }
  }

  if (src && window.EventSource) {
    var es = new EventSource("/events");
    es.addEventListener("hello", function () { linked = true; serverDown = false; showLink(); soon(); });
    es.addEventListener("change", function (e) {
      var d = {};
      try { d = JSON.parse(e.data); } catch (err) { d = {}; }
      if (d.down) {
        agentDown = true; showLink();
        setStatus("down", downMessage(d.down, ""));
      }
      soon();
    });
    es.onerror = function () { serverDown = true; showLink(); };
  }
  schedule();
  setInterval(tick, 200);
  tick();
  showLink();

  // "N more" shows the column's next page, in place; the address keeps it.
  live.addEventListener("click", function (e) {
    var a = e.target.closest && e.target.closest("a[data-more]");
    if (!a) { return; }
    e.preventDefault();
    var next = new URL(a.getAttribute("href"), window.location.href);
    history.replaceState(null, "", next.pathname + next.search);
    refresh();
  });

  // The search filters as you type: the address keeps it, the board is
  // re-read (the server filters every card, not only those shown).
  var q = document.getElementById("q");
  var typing = null;
  if (q) {
    q.addEventListener("input", function () {
      if (typing) { clearTimeout(typing); }
      typing = setTimeout(function () {
        var u = new URL(window.location.href);
        if (q.value.trim()) { u.searchParams.set("q", q.value.trim()); } else { u.searchParams.delete("q"); }
        history.replaceState(null, "", u.pathname + u.search);
        refresh();
      }, 150);
    });
  }

  var btn = document.getElementById("preview-run");
  var out = document.getElementById("preview");
  if (btn && out) {
    btn.addEventListener("click", function () {
      btn.disabled = true;
      out.textContent = "deciding…";
      fetch("/preview", { method: "POST", credentials: "same-origin", cache: "no-store" })
        .then(function (r) { return r.text(); })
        .then(function (t) { out.innerHTML = t; })
        .catch(function (e) { out.textContent = "preview failed: " + e; })
        .then(function () { btn.disabled = false; });
    });
  }
})();
