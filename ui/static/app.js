// The board's live updates. The server renders every fragment (escaped by
// html/template); this script only fetches them again when the agent's
// event stream says something changed, and keeps lease countdowns ticking.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var link = document.getElementById("link");
  if (!live) { return; }
  var src = live.getAttribute("data-src");
  var refreshMS = parseInt(live.getAttribute("data-refresh-ms"), 10) || 0;
  var renderedAt = performance.now();
  var pending = null, inflight = false, again = false, timer = null;

  function setLink(text, ok) {
    if (!link) { return; }
    link.textContent = text;
    link.className = "link " + (ok ? "ok" : "bad");
  }

  // Countdowns count from the moment their fragment was rendered, on the
  // browser's monotonic clock: the server computed the remaining time.
  function fmt(ms) {
    var s = Math.round(Math.abs(ms) / 100) / 10;
    var txt = s >= 60 ? Math.floor(s / 60) + "m" + (s % 60).toFixed(1) + "s" : s.toFixed(1) + "s";
    return ms < 0 ? "expired " + txt + " ago" : txt + " left";
  }
  function tick() {
    var elapsed = performance.now() - renderedAt;
    var els = document.querySelectorAll("[data-lease-ms]");
    for (var i = 0; i < els.length; i++) {
      var left = parseInt(els[i].getAttribute("data-lease-ms"), 10) - elapsed;
      els[i].textContent = fmt(left);
      els[i].classList.toggle("expired", left < 0);
    }
  }

  function refresh() {
    if (!src) { return; }
    if (inflight) { again = true; return; }
    inflight = true;
    fetch(src + window.location.search, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.text().then(function (t) { return { ok: r.ok, text: t }; }); })
      .then(function (res) {
        // The fragment is server-rendered HTML (html/template): every name
        // in it is already escaped text.
        live.innerHTML = res.text;
        renderedAt = performance.now();
        tick();
        live.setAttribute("data-rendered", String(Date.now()));
      })
      .catch(function () { setLink("server unreachable", false); })
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
  // Leases are renewed without an event: re-read the board on the agent's
  // heartbeat schedule as well, so a countdown shows the lease as renewed.
  function schedule() {
    if (timer) { clearTimeout(timer); }
    if (refreshMS > 0) { timer = setTimeout(refresh, refreshMS); }
  }

  if (src && window.EventSource) {
    var es = new EventSource("/events");
    es.addEventListener("hello", function () { setLink("live", true); soon(); });
    es.addEventListener("change", soon);
    es.onerror = function () { setLink("reconnecting…", false); };
  }
  schedule();
  setInterval(tick, 200);
  tick();

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
