// JCT dashboard: live updates from /ui/events (one stream per page) and lease countdowns. No dependencies.
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

  function connect() {
    if (!window.EventSource) return;
    var dot = document.getElementById("live");
    var first = true;
    live = new EventSource("/ui/events");
    live.addEventListener("hello", function () {
      if (dot) dot.className = "live on";
      document.body.setAttribute("data-live", "on");
      // A reconnect (after a restart, say) catches up with whatever changed meanwhile.
      if (!first) refresh();
      first = false;
    });
    live.addEventListener("change", refresh);
    live.onerror = function () {
      if (dot) dot.className = "live off";
      document.body.setAttribute("data-live", "off");
    };
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
    connect();
  });
})();
