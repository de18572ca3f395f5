// queuelog dashboard: live refresh and confirmations. The pages work without it.
(function () {
  "use strict";

  // Forms with data-confirm ask before they post.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });

  // An element #live with data-refresh="N" is fetched again every N seconds and
  // swapped in place, unless the user is typing or the tab is hidden.
  function refresh(live, seconds) {
    window.setTimeout(function tick() {
      var busy = document.activeElement && live.contains(document.activeElement) &&
        /^(INPUT|SELECT|TEXTAREA)$/.test(document.activeElement.tagName);
      if (document.hidden || busy) {
        window.setTimeout(tick, seconds * 1000);
        return;
      }
      fetch(window.location.href, { credentials: "same-origin", redirect: "manual" })
        .then(function (response) {
          if (response.type === "opaqueredirect" || response.status === 401) {
            window.location.reload();  // the session ended: show the login form
            return null;
          }
          return response.ok ? response.text() : null;
        })
        .then(function (html) {
          if (html) {
            var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
            var current = document.getElementById("live");
            if (fresh && current) {
              current.replaceWith(fresh);
              live = fresh;
            }
          }
        })
        .catch(function () { /* try again next time */ })
        .then(function () { window.setTimeout(tick, seconds * 1000); });
    }, seconds * 1000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var live = document.getElementById("live");
    var seconds = live && parseInt(live.getAttribute("data-refresh") || "", 10);
    if (live && seconds > 0) {
      refresh(live, seconds);
    }
  });
})();
