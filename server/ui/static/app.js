// JCT dashboard: live updates from /ui/events (one stream per browser, shared by its tabs) and lease
// countdowns. No dependencies.
(function () {
  "use strict";
  var live = null;
  var pending = false;
  var busy = false;

  function editing() {
    var el = document.activeElement;
    if (el && el.form) return true;
    var fields = document.querySelectorAll("main textarea, main input:not([type=hidden]):not([type=password])");
    for (var i = 0; i < fields.length; i++) {
      if (fields[i].value && fields[i].value !== fields[i].defaultValue) return true;
    }
    return false;
  }

  // Fetch this page again and swap its content in place: no reload, scroll and URL kept.
  function refresh() {
    if (busy) { pending = true; return; }
    if (editing()) { pending = true; return; }
    busy = true;
    pending = false;
    fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (response.redirected || !response.ok) throw new Error("status " + response.status);
        return response.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("content");
        var main = document.getElementById("content");
        if (fresh && main) {
          main.replaceChildren.apply(main, Array.prototype.slice.call(fresh.childNodes).map(function (n) {
            return document.importNode(n, true);
          }));
          document.body.setAttribute("data-refreshed", String(Date.now()));
          countdowns();
        }
      })
      .catch(function () { /* the next event or reconnect tries again */ })
      .then(function () { busy = false; if (pending) setTimeout(refresh, 100); });
  }

  function shown(on) {
    var dot = document.getElementById("live");
    if (dot) dot.className = on ? "live on" : "live off";
    document.body.setAttribute("data-live", on ? "on" : "off");
  }

  // One event stream per browser, not per tab: a browser opens six HTTP/1.1 connections to a host, so six
  // tabs each holding a stream would leave none for a seventh tab to load with. The tab holding the lock
  // "jct-live" (a Web Lock, released when the tab goes) opens the stream and passes what it hears to the
  // other tabs over a BroadcastChannel; when it closes, another tab takes the lock and the stream over.
  function share() {
    var channel = new BroadcastChannel("jct-live");
    var on = false;
    var followed = false;  // another tab led before this one: taking over, catch up with what passed between
    channel.onmessage = function (message) {
      var kind = message.data && message.data.kind;
      if (kind === "hello" || kind === "state") {
        followed = true;
        on = !!message.data.on;
        shown(on);
        if (kind === "hello" && message.data.again) refresh();
      } else if (kind === "change") {
        refresh();
      } else if (kind === "ask" && live) {
        channel.postMessage({ kind: "state", on: on });
      }
    };
    channel.postMessage({ kind: "ask" });
    navigator.locks.request("jct-live", function () {
      // Leading from now until the tab closes: the promise below never settles, so the lock is held.
      return new Promise(function () {
        connect(function (kind, again) {
          on = kind === "hello";
          channel.postMessage(kind === "change" ? { kind: "change" } : { kind: "hello", on: on, again: again });
        }, followed);
      });
    });
  }

  // `tell` passes the stream's news on to other tabs; a tab that took over from another catches up at once.
  function connect(tell, tookOver) {
    var first = !tookOver;
    live = new EventSource("/ui/events");
    live.addEventListener("hello", function () {
      shown(true);
      // A reconnect (after a restart, say) catches up with whatever changed meanwhile.
      if (!first) refresh();
      if (tell) tell("hello", !first);
      first = false;
    });
    live.addEventListener("change", function () {
      refresh();
      if (tell) tell("change");
    });
    live.onerror = function () {
      shown(false);
      if (tell) tell("off");
    };
  }

  // Without Web Locks (not a secure context): a stream per tab, closed while the tab is hidden, so that
  // hidden tabs do not hold the connections a visible one needs.
  function alone() {
    connect(null, false);
    document.addEventListener("visibilitychange", function () {
      if (document.hidden && live) {
        live.close();
        live = null;
        shown(false);
      } else if (!document.hidden && !live) {
        connect(null, true);
      }
    });
  }

  function left(until) {
    var seconds = Math.round((until - Date.now()) / 1000);
    if (seconds <= 0) return "overdue";
    var m = Math.floor(seconds / 60), s = seconds % 60;
    return (m ? m + "m " : "") + s + "s";
  }

  function countdowns() {
    var items = document.querySelectorAll("time.countdown");
    for (var i = 0; i < items.length; i++) {
      var until = Date.parse(items[i].getAttribute("datetime"));
      if (!isNaN(until)) {
        items[i].textContent = left(until);
        items[i].classList.toggle("overdue", until <= Date.now());
      }
    }
  }

  document.addEventListener("focusout", function () { if (pending) setTimeout(refresh, 50); });
  document.addEventListener("DOMContentLoaded", function () {
    countdowns();
    setInterval(countdowns, 1000);
    if (!window.EventSource) return;
    if (window.BroadcastChannel && navigator.locks) share();
    else alone();
  });
})();
