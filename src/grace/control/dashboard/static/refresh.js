// Reload a page that shows the cluster now (map, queue, alerts) every data-refresh-s seconds,
// while the tab is visible: a hidden tab costs the control plane nothing.
(function () {
  "use strict";
  var seconds = Number(document.body.dataset.refreshS || 0);
  if (!(seconds > 0)) {
    return;
  }
  window.setInterval(function () {
    if (document.visibilityState === "visible") {
      window.location.reload();
    }
  }, seconds * 1000);
}());
