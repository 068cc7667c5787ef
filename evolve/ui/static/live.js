// vevo ui: keeps the open page current without a reload. The server sends each run's version (newest program
// id and training step) as a server-sent event; when one changes, the page is fetched again and its <main> swapped
// in. The new HTML is parsed by DOMParser (scripts in it never run) and is server-escaped; nothing here builds
// HTML from data. Hand-written, no library.
(function () {
  "use strict";
  var state = document.getElementById("live-state");
  var last = null, busy = false, again = false;
  var frozen = /\/program\/\d+$/.test(location.pathname);  // a program never changes once archived

  function say(text) { if (state) { state.textContent = text; } }

  function editing(main) {
    var a = document.activeElement;
    return a && main.contains(a) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName);
  }

  function refresh() {
    if (busy) { again = true; return; }
    var cur = document.getElementById("live");
    if (!cur || editing(cur)) { return; }
    busy = true;
    fetch(location.href, {credentials: "same-origin", cache: "no-store"})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (text === null) { return; }
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.getElementById("live");
        cur = document.getElementById("live");
        if (!fresh || !cur || editing(cur)) { return; }
        var open = Array.prototype.map.call(cur.querySelectorAll("details"), function (d) { return d.open; });
        var checks = Array.prototype.map.call(cur.querySelectorAll("input[type=checkbox]"),
                                              function (c) { return c.checked; });
        var node = document.importNode(fresh, true);
        var ds = node.querySelectorAll("details"), cs = node.querySelectorAll("input[type=checkbox]");
        if (ds.length === open.length) { for (var i = 0; i < ds.length; i++) { ds[i].open = open[i]; } }
        if (cs.length === checks.length) { for (var j = 0; j < cs.length; j++) { cs[j].checked = checks[j]; } }
        cur.replaceWith(node);
        say("live · updated " + new Date().toLocaleTimeString());
      })
      .catch(function () { say("live: fetch failed, retrying"); })
      .then(function () { busy = false; if (again) { again = false; refresh(); } });
  }

  if (!window.EventSource) { say("live: not supported by this browser"); return; }
  var es = new EventSource("/api/events");
  es.addEventListener("version", function (ev) {
    if (last !== null && ev.data !== last && !frozen) { refresh(); }
    if (last === null) { say("live"); }
    last = ev.data;
  });
  es.onerror = function () { say("live: disconnected, retrying"); };
})();
