// The job page: step time, loss and phase curves from /ui/api/jobs/N/series, and the log
// tail from /jobs/N/logs, both polled every data-poll-ms. Same-origin reads with the
// session cookie; the page has no inline script (its CSP allows none).
(function () {
  "use strict";
  var root = document.getElementById("job");
  if (!root) {
    return;
  }
  var jobId = root.dataset.jobId;
  var pollMs = Number(root.dataset.pollMs) || 3000;
  var config = {displaylogo: false, responsive: true, displayModeBar: false};
  var PHASE_COLOURS = {
    data: "#d62728", h2d: "#ff7f0e", forward: "#1f77b4", backward: "#17becf",
    allreduce: "#9467bd", optimizer: "#2ca02c", checkpoint: "#8c564b", sync: "#e377c2"
  };

  function layout(title, xTitle, yTitle) {
    return {
      title: {text: title, font: {size: 14}},
      margin: {l: 56, r: 12, t: 36, b: 44},
      height: 280,
      xaxis: {title: {text: xTitle}},
      yaxis: {title: {text: yTitle}, rangemode: "tozero"},
      legend: {orientation: "h", y: -0.25},
      showlegend: true
    };
  }

  // One line per attempt: a restart resumes from a checkpoint, so its steps overlap.
  function perAttempt(s, key) {
    var traces = {};
    var count = 0;
    for (var i = 0; i < s.step.length; i++) {
      var y = s[key][i];
      if (y === null || y === undefined) {
        continue;
      }
      var a = s.attempt[i];
      if (!traces[a]) {
        traces[a] = {x: [], y: [], type: "scatter", mode: "lines+markers",
                     marker: {size: 4}, name: "attempt " + a};
      }
      traces[a].x.push(s.step[i]);
      traces[a].y.push(y);
      count++;
    }
    return {traces: Object.keys(traces).map(function (k) { return traces[k]; }), count: count};
  }

  function phases(s) {
    var when = s.at.map(function (t) { return new Date(t * 1000); });
    return Object.keys(s.phases).map(function (name) {
      return {x: when, y: s.phases[name], type: "scatter", mode: "lines", stackgroup: "phases",
              name: name, line: {width: 0.5, color: PHASE_COLOURS[name]}};
    });
  }

  function draw(s) {
    var stepTime = perAttempt(s, "step_s");
    var loss = perAttempt(s, "loss");
    var chart = document.getElementById("step-time-chart");
    Plotly.react(chart, stepTime.traces, layout("Seconds per step", "step", "s"), config);
    chart.dataset.points = String(stepTime.count);
    Plotly.react("loss-chart", loss.traces, layout("Loss", "step", "loss"), config);
    Plotly.react("phase-chart", phases(s),
                 layout("Seconds per step by phase (rank 0)", "time", "s"), config);
    document.getElementById("no-points").hidden = s.points > 0;
  }

  function poll(url, handle) {
    var busy = false;
    function once() {
      if (busy || document.visibilityState !== "visible") {
        return;
      }
      busy = true;
      fetch(url, {credentials: "same-origin", cache: "no-store"})
        .then(function (r) { return r.ok ? handle(r) : null; })
        .catch(function () { return null; })
        .then(function () { busy = false; });
    }
    once();
    window.setInterval(once, pollMs);
  }

  poll("/ui/api/jobs/" + jobId + "/series", function (r) {
    return r.json().then(draw);
  });
  poll("/jobs/" + jobId + "/logs?tail=50", function (r) {
    return r.text().then(function (text) {
      var pre = document.getElementById("log-tail");
      var atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent = text || "(no output yet)";
      if (atEnd) {
        pre.scrollTop = pre.scrollHeight;
      }
    });
  });
}());
