// Plexus dashboard: polls /api/* every second and updates the page in place.
(function () {
  "use strict";
  var live = document.body.dataset.live;
  if (!live) return;
  var mark = document.getElementById("live");
  function text(el, s) { if (el && el.textContent !== String(s)) el.textContent = String(s); }
  // A subtask's error, then every failed attempt with its own (as the server renders them).
  function errors(cell, s) {
    var lines = [s.error].concat((s.failed_attempts || []).map(function (f) { return "attempt " + f.attempt + ": " + f.error; }));
    if (!cell || cell.getAttribute("data-shown") === lines.join("\n") || lines.join("") === "") return;
    cell.setAttribute("data-shown", lines.join("\n"));
    cell.textContent = "";
    lines.forEach(function (l, i) { if (i) cell.appendChild(document.createElement("br")); cell.appendChild(document.createTextNode(l)); });
  }
  function fmtBytes(n) { var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0; while (n >= 1024 && i < 4) { n /= 1024; i++; } return (i ? n.toFixed(1) : n) + " " + u[i]; }
  function bar(cell, done, total) {
    var i = cell.querySelector(".bar i"); if (i) i.style.width = (total ? (done * 100 / total).toFixed(1) : 0) + "%";
    text(cell.querySelector(".count"), done + "/" + total);
  }
  function tick() { document.body.dataset.updates = String(Number(document.body.dataset.updates || "0") + 1); if (mark) mark.className = ""; }
  // One request at a time: a poll that finds the last one unanswered skips its turn.
  var busy = false;
  function get(url, f) {
    if (busy) return;
    busy = true;
    var x = new XMLHttpRequest();
    x.open("GET", url);
    x.onload = function () {
      busy = false;
      if (x.status === 200) { try { f(JSON.parse(x.responseText)); tick(); } catch (e) { if (mark) mark.className = "stale"; } }
      else if (mark) mark.className = "stale";
    };
    x.onerror = function () { busy = false; if (mark) mark.className = "stale"; };
    x.send();
  }
  function state(el, s) { if (!el) return; text(el, s); el.className = (el.className.replace(/\s*state-\S+/g, "") + " state-" + s).trim(); }
  var jobVersion = "", jobDone = false;
  var updaters = {
    jobs: function () {
      get("/api/jobs" + location.search, function (d) {
        var body = document.querySelector("#jobs tbody");
        d.jobs.forEach(function (j) {
          var row = body.querySelector('tr[data-job="' + j.job_id + '"]');
          if (!row) {
            row = document.createElement("tr"); row.dataset.job = j.job_id;
            var a = document.createElement("a"); a.href = "/jobs/" + j.job_id; a.textContent = j.job_id.slice(0, 12);
            var cells = [a, j.name, "", "", "just now", "", "", j.queue || "default", ""];
            cells.forEach(function (c, k) { var td = document.createElement("td"); if (typeof c === "string") td.textContent = c; else td.appendChild(c); row.appendChild(td); });
            row.children[2].className = "state"; row.children[3].className = "progress";
            row.children[3].innerHTML = '<span class="bar"><i></i></span> <span class="count"></span>';
            row.children[5].className = "queued"; row.children[6].className = "ran"; row.children[8].className = "err";
            body.insertBefore(row, body.firstChild);
            var empty = document.getElementById("empty"); if (empty) empty.remove();
          }
          state(row.querySelector(".state"), j.phase || j.state);
          bar(row.querySelector(".progress"), j.done, j.total);
          text(row.querySelector(".queued"), j.queued); text(row.querySelector(".ran"), j.ran);
          text(row.querySelector(".err"), j.error);
        });
      });
    },
    job: function () {
      var id = document.getElementById("job").dataset.job;
      if (jobDone) return;
      // Long-poll: answered as soon as the job's progress differs from what this page shows.
      get("/api/jobs/" + id + (jobVersion ? "?wait=" + jobVersion : ""), function (j) {
        jobVersion = j.version;
        if (j.state !== "running") jobDone = true;
        state(document.getElementById("job-state"), j.phase || j.state);
        text(document.getElementById("job-why"), j.phase_reason || "");
        bar(document.getElementById("job-progress"), j.done, j.total);
        j.groups.forEach(function (g) {
          var n = document.querySelector('#dag .node[data-task="' + g.task + '"]');
          if (n) {
            n.setAttribute("data-state", g.state);
            var done = n.querySelector("rect.done"); if (done) done.setAttribute("width", (170 * (g.replicas ? g.succeeded / g.replicas : 0)).toFixed(1));
            text(n.querySelector(".counts"), g.succeeded + "/" + g.replicas + " done" + (g.running ? ", " + g.running + " running" : "") + (g.failed ? ", " + g.failed + " failed" : ""));
          }
          var r = document.querySelector('#groups tr[data-task="' + g.task + '"]');
          if (r) { text(r.querySelector(".waiting"), g.waiting); text(r.querySelector(".ready"), g.ready); text(r.querySelector(".running"), g.running + g.assigned); text(r.querySelector(".succeeded"), g.succeeded); text(r.querySelector(".failed"), g.failed); text(r.querySelector(".reason"), g.waiting_reason); }
        });
        j.subtasks.forEach(function (s) {
          var r = document.querySelector('#subtasks tr[data-subtask="' + s.task + "/" + s.rank + '"]');
          if (r) { state(r.querySelector(".state"), s.state); text(r.querySelector(".attempt"), s.attempt); text(r.querySelector(".worker"), s.worker.slice(0, 12)); errors(r.querySelector(".err"), s); }
        });
      });
    },
    workers: function () {
      // The same page of workers as the one shown (its ?after=).
      get("/api/workers" + location.search, function (d) {
        text(document.getElementById("summary"), d.summary);
        d.workers.forEach(function (w) {
          var r = document.querySelector('#workers tr[data-worker="' + w.worker_id + '"]');
          if (!r) return;
          text(r.querySelector(".state"), w.alive ? "alive" : "lost");
          text(r.querySelector(".util"), (w.cpu_utilisation * 100).toFixed(0));
          text(r.querySelector(".assigned"), w.assigned);
          text(r.querySelector(".cache"), fmtBytes(w.cache_used));
          w.rails.forEach(function (x, k) { var e = r.querySelector('.rail[data-rail="' + k + '"] .traffic'); text(e, fmtBytes(x.sent) + " / " + fmtBytes(x.received)); });
          w.gpus.forEach(function (g) { var e = r.querySelector('.gpu[data-gpu="' + g.index + '"] .gutil'); text(e, (g.utilisation * 100).toFixed(0) + "%"); });
        });
      });
    },
    policy: function () {
      get("/api/policy", function (p) {
        text(document.getElementById("decisions"), p.decisions);
        text(document.getElementById("rate"), p.decisions_per_s.toFixed(2));
        text(document.getElementById("steps"), p.training_steps);
        text(document.getElementById("explore"), p.exploration.toFixed(3));
        if (p.loss !== null) text(document.getElementById("loss"), p.loss.toFixed(5));
        var line = document.getElementById("curve-line");
        if (line && p.curve.length) {
          var x0 = p.curve[0][0], x1 = p.curve[p.curve.length - 1][0];
          var y1 = Math.max.apply(null, p.curve.map(function (c) { return c[1]; }));
          var y = function (v) { return (210 - 200 * (y1 > 0 ? v / y1 : 0)).toFixed(1); };
          // One point is drawn as a short flat line, so the curve shows from the first step.
          line.setAttribute("points", p.curve.length === 1 ? "10.0," + y(p.curve[0][1]) + " 630.0," + y(p.curve[0][1]) :
            p.curve.map(function (c) { return (10 + 620 * (c[0] - x0) / Math.max(1, x1 - x0)).toFixed(1) + "," + y(c[1]); }).join(" "));
        }
        var a = p.anchor;
        if (a) {
          text(document.getElementById("departures"), a.departures + " of " + a.decisions + " decisions (" + (a.departure_share * 100).toFixed(1) + " %)");
          text(document.getElementById("gain"), a.judged === 0 ? "none judged yet" :
            (a.gain_ms >= 0 ? "+" : "") + a.gain_ms.toFixed(0) + " ms over " + a.judged + " judged (" + (a.gain_share >= 0 ? "+" : "") + (a.gain_share * 100).toFixed(1) + " % of fastest's estimated time for them)");
          text(document.getElementById("explored"), a.explored);
          text(document.getElementById("withheld"), a.withheld);
          text(document.getElementById("probes"), a.probes);
          text(document.getElementById("guard"), a.holding ? "holding the learner to fastest: " + a.holding : "trusts the learner");
          text(document.getElementById("fallbacks"), a.fallbacks);
        }
      });
    }
  };
  var f = updaters[live];
  if (!f) return;
  f();
  setInterval(f, 1000);
})();
