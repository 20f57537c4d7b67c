// mlab view: polls the server for the run list and the chosen run, and redraws only what changed.
// Everything from a run folder is text: it goes into the page through esc() or textContent, never as markup.
(function () {
  'use strict';
  var POLL_MS = parseInt(document.querySelector('meta[name="mlab-poll-ms"]').content, 10) || 1000;
  var listJson = '', run = null;  // run: {id, summary, steps, calls, started, detailJson, liveJson, step, follow}

  function esc(s) {
    return String(s === null || s === undefined ? '' : s).replace(/[&<>"']/g, function (c) {
      return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c];
    });
  }
  function num(v, digits) { return v === null || v === undefined ? '-' : Number(v).toPrecision(digits || 5); }
  function secs(v) {
    if (v === null || v === undefined) return '-';
    v = Math.max(0, v);
    return v < 60 ? v.toFixed(1) + ' s' : v < 3600 ? Math.floor(v / 60) + ' min ' + Math.round(v % 60) + ' s' :
      Math.floor(v / 3600) + ' h ' + Math.round((v % 3600) / 60) + ' min';
  }
  function cost(s) { return s && s.cost_text ? s.cost_text : '-'; }  // "unknown" when a model has no price, never $0
  function callCost(c) { return c.cost_usd === null || c.cost_usd === undefined ? (c.error ? '-' : 'unknown') : '$' + c.cost_usd.toFixed(5); }
  function badge(status) { return '<span class="badge st-' + esc(status) + '">' + esc(status) + '</span>'; }
  function params() {
    var out = {};
    location.hash.replace(/^#/, '').split('&').forEach(function (kv) {
      var i = kv.indexOf('='); if (i > 0) out[kv.slice(0, i)] = decodeURIComponent(kv.slice(i + 1));
    });
    return out;
  }
  function go(id, step) { location.hash = 'run=' + encodeURIComponent(id) + (step ? '&step=' + step : ''); }
  function getJson(url) {
    return fetch(url, {cache: 'no-store'}).then(function (r) {
      if (!r.ok) throw new Error(r.status + ' ' + r.statusText);
      return r.json();
    });
  }

  // ---- the run list ------------------------------------------------------------------------------------
  function drawList(data) {
    document.getElementById('title').textContent = 'mlab view — ' + data.root + (data.bench ? ' (bench)' : '');
    document.getElementById('no-runs').hidden = data.runs.length > 0;
    var h = '';
    data.runs.forEach(function (r) {
      var sel = run && r.id === run.id ? ' class="sel"' : '';
      var what = [r.task, r.agent, r.llm, r.seed === undefined || r.seed === null ? null : 'seed ' + r.seed]
        .filter(function (x) { return x !== null && x !== undefined; }).join(' · ');
      var steps = (r.steps === undefined ? '-' : r.steps) + (r.max_steps ? '/' + r.max_steps : '');
      if (r.live) steps += ' <span class="sub">+1</span>';
      h += '<tr' + sel + (r.id === null ? '' : ' data-id="' + esc(r.id) + '"') + '><td class="name">' + esc(r.name) +
        '<div class="sub">' + esc(what) + (r.error ? ' <span class="err">' + esc(r.error) + '</span>' : '') + '</div></td><td>' +
        badge(r.status) + (r.failure ? '<div class="sub">' + esc(r.failure) + '</div>' : '') + '</td><td>' + steps + '</td><td>' +
        num(r.final_score) + '</td><td>' + esc(cost(r)) + '</td></tr>';
    });
    document.querySelector('#runs tbody').innerHTML = h;
  }
  document.querySelector('#runs tbody').addEventListener('click', function (ev) {
    var tr = ev.target.closest('tr[data-id]'); if (tr) go(tr.getAttribute('data-id'));
  });

  // ---- one run -----------------------------------------------------------------------------------------
  function chart() {
    var pts = [];
    run.steps.forEach(function (s) { if (s.score !== null && s.score !== undefined) pts.push([s.index, s.score]); });
    var fin = run.summary.final_score;
    if (fin !== null && fin !== undefined && run.summary.status !== 'running') pts.push([run.steps.length, fin]);
    if (!pts.length) return '<p class="muted" id="score-chart">No scores yet: the final score comes when the run ends; ' +
      'scores after each step come from a bench run with --intermediate.</p>';
    var W = 560, H = 170, P = 34, xs = pts.map(function (p) { return p[0]; }), ys = pts.map(function (p) { return p[1]; });
    var x1 = Math.max.apply(null, xs.concat([1])), y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    var pad = (y1 - y0) * 0.08 || Math.abs(y0) * 0.1 || 1; y0 -= pad; y1 += pad;
    function X(v) { return P + (W - 2 * P) * v / x1; }
    function Y(v) { return H - P + (2 * P - H) * (v - y0) / (y1 - y0); }
    var svg = '<svg id="score-chart" width="' + W + '" height="' + H + '" style="border:1px solid #ddd;background:#fff">';
    svg += '<polyline fill="none" stroke="#1a73e8" points="' + pts.map(function (p) { return X(p[0]) + ',' + Y(p[1]); }).join(' ') + '"/>';
    pts.forEach(function (p) {
      var cur = p[0] === run.step;
      svg += '<circle cx="' + X(p[0]) + '" cy="' + Y(p[1]) + '" r="' + (cur ? 5 : 3) + '" fill="' + (cur ? '#d93025' : '#1a73e8') +
        '"><title>step ' + p[0] + ': ' + esc(p[1]) + '</title></circle>';
    });
    svg += '<text x="4" y="' + (P - 4) + '" font-size="10">' + esc(num(y1, 4)) + '</text><text x="4" y="' + (H - P + 12) +
      '" font-size="10">' + esc(num(y0, 4)) + '</text><text x="' + (W - P) + '" y="' + (H - 6) +
      '" font-size="10" text-anchor="end">step ' + x1 + '</text><text x="' + P + '" y="' + (H - 6) + '" font-size="10">score over steps</text></svg>';
    return svg;
  }
  function diffHtml(text) {
    return text.split('\n').map(function (l) {
      var c = l.indexOf('+') === 0 ? 'add' : l.indexOf('-') === 0 ? 'del' : l.indexOf('@@') === 0 ? 'hunk' : '';
      return c ? '<span class="' + c + '">' + esc(l) + '</span>' : esc(l);
    }).join('\n');
  }
  function callsTable(calls, id) {
    if (!calls.length) return '<p class="muted" id="' + id + '">No model calls.</p>';
    var h = '<table id="' + id + '"><thead><tr><th>#</th><th>step</th><th>role</th><th>model</th><th>prompt tokens</th>' +
      '<th>completion tokens</th><th>cost</th><th>latency</th><th></th></tr></thead><tbody>';
    calls.forEach(function (c) {
      h += '<tr><td>' + (c.n + 1) + '</td><td>' + esc(c.step === null ? '-' : c.step) + '</td><td>' + esc(c.role) + '</td><td>' + esc(c.model) +
        '</td><td>' + c.prompt_tokens + '</td><td>' + c.completion_tokens + '</td><td class="cost">' + esc(callCost(c)) + '</td><td>' +
        secs(c.latency_s) + (c.cached ? ' (cached)' : '') + '</td><td>' + (c.error ? '<span class="err">' + esc(c.error) + '</span>' : '') +
        '<details><summary>messages</summary>' + c.messages.map(function (m) {
          return '<b>' + esc(m.role) + '</b><pre>' + esc(m.content) + '</pre>';
        }).join('') + (Object.keys(c.params || {}).length ? '<b>params</b><pre>' + esc(JSON.stringify(c.params)) + '</pre>' : '') +
        '<b>completion</b><pre>' + esc(c.completion === null ? '(none)' : c.completion) + '</pre></details></td></tr>';
    });
    return h + '</tbody></table>';
  }
  // A search agent's solution graph (its state's "graph"): a node per row, the best one marked.
  function graphTable(g) {
    if (!g || !g.nodes || !g.nodes.length) return '';
    return '<h3>Solution graph</h3><p class="muted">fitness: ' + esc(g.direction) + ' is better; * marks the best node</p>' +
      '<table id="solution-graph"><thead><tr><th>node</th><th>parents</th><th>operator</th><th>status</th><th>fitness</th>' +
      '<th>best</th><th>plan</th></tr></thead><tbody>' + g.nodes.map(function (x) {
        return '<tr><td>' + esc(x.node) + '</td><td>' + esc(x.parents) + '</td><td>' + esc(x.operator) + '</td><td>' +
          esc(x.status) + '</td><td>' + num(x.fitness) + '</td><td>' + (x.best ? '*' : '') + '</td><td>' + esc(x.plan) + '</td></tr>';
      }).join('') + '</tbody></table>';
  }
  function drawRun() {
    var s = run.summary, n = run.steps.length;
    if (run.follow || run.step > n) run.step = n;
    var cfg = run.config || {};
    var h = '<h2 id="run-title">' + esc(s.name) + '</h2><p><span id="run-status" class="badge st-' + esc(s.status) + '">' +
      esc(s.status) + (s.end_reason ? ': ' + esc(s.end_reason) : '') + '</span></p><p>' +
      [cfg.task, cfg.agent, cfg.llm ? 'model ' + cfg.llm : null, 'seed ' + cfg.seed, cfg.sandbox ? 'sandbox ' + cfg.sandbox : null]
        .filter(Boolean).map(esc).join(' · ') + '</p><p>final score <b id="run-score">' + num(s.final_score) + '</b>' +
      (s.final_score_error ? ' <span class="err">' + esc(s.final_score_error) + '</span>' : '') + ' · ' + n + (s.max_steps ? '/' + s.max_steps : '') +
      ' steps · ' + (s.tokens || 0) + ' tokens · cost <span id="run-cost">' + esc(s.calls ? cost(s) : 'none (no model calls)') + '</span>' +
      (s.calls && s.unpriced_calls >= s.calls ? ' <span class="muted">(no call has a price)</span>' : '') +
      ' · ' + secs(s.time_s) + '</p>';
    h += '<div id="live-box"></div>' + chart() + graphTable(run.graph);
    h += '<div id="steps">' + run.steps.map(function (x) {
      return '<button data-step="' + x.index + '" class="' + (x.index === run.step ? 'cur ' : '') + (x.is_error ? 'bad' : '') +
        '" title="' + esc(x.action) + '">' + x.index + '</button>';
    }).join('') + (run.follow ? '' : ' <a id="follow" href="#run=' + encodeURIComponent(run.id) + '">follow the latest step</a>') +
      '</div>';
    var st = run.steps[run.step - 1];
    if (!st) h += '<p class="muted" id="no-steps">No steps yet.</p>';
    else {
      h += '<div id="step" data-step="' + st.index + '"><h3>Step ' + st.index + ' of ' + n + ': <span id="step-action">' + esc(st.action) +
        '</span>' + (st.is_error ? ' <span class="err">(error)</span>' : '') + '</h3><p class="muted">' + secs(st.duration_s) + '; ' +
        st.tokens + ' tokens so far' + (st.score !== null && st.score !== undefined ? '; score after this step <b>' + num(st.score) + '</b>' : '') +
        (st.score_error ? '; <span class="err">' + esc(st.score_error) + '</span>' : '') + '</p>';
      var keys = Object.keys(st.entries || {});
      if (keys.length) {
        h += '<h4>Reasoning</h4><table id="step-thought">' + keys.map(function (k) {
          var v = st.entries[k];
          return '<tr><th>' + esc(k) + '</th><td><pre>' + esc(typeof v === 'string' ? v : JSON.stringify(v, null, 1)) + '</pre></td></tr>';
        }).join('') + '</table>';
      }
      h += '<h4>Action input</h4><pre id="step-args">' + esc(JSON.stringify(st.args, null, 1)) + '</pre>';
      h += '<h4>Observation</h4><pre id="step-observation" class="' + (st.is_error ? 'err' : '') + '">' + esc(st.observation) + '</pre>';
      h += '<h4>Files changed</h4>' + (st.changes.length ? '<div id="step-diff">' + st.changes.map(function (c) {
        return '<p><b>' + esc(c.file) + '</b> ' + esc(c.change) + '</p><pre>' + diffHtml(c.diff) + '</pre>';
      }).join('') + '</div>' : '<p class="muted" id="step-diff">none</p>');
      h += '<h4>Model calls in this step</h4>' + callsTable(run.calls.filter(function (c) { return c.step === st.index; }), 'step-calls');
      h += '</div>';
    }
    h += '<h3>All model calls</h3><details><summary>' + run.calls.length + ' calls</summary>' + callsTable(run.calls, 'all-calls') + '</details>';
    if ((run.warnings || []).length) h += '<h3>Warnings</h3><pre>' + esc(run.warnings.join('\n')) + '</pre>';
    if (run.errors_log) h += '<h3>errors.log</h3><pre class="err" id="errors-log">' + esc(run.errors_log) + '</pre>';
    var v = document.getElementById('viewer'); v.innerHTML = h;
    v.querySelector('#steps').onclick = function (ev) {
      var b = ev.target.closest('button[data-step]'); if (b) go(run.id, b.getAttribute('data-step'));
    };
    drawLive();
  }
  function drawLive() {
    var box = document.getElementById('live-box'); if (!box) return;
    var live = run && run.summary.live;
    if (!live) { box.innerHTML = ''; return; }
    var args = Object.keys(live.args || {}).map(function (k) { return k + '=' + live.args[k]; }).join(', ');
    box.innerHTML = '<div id="live"><b>Step ' + live.step + ' in progress:</b> <span id="live-action">' +
      esc(live.action === null ? 'waiting for the agent' : live.action + (args ? ' (' + args + ')' : '')) +
      '</span> — <span id="live-elapsed" data-started="' + Number(live.started) + '"></span>' +
      (live.output_tail ? '<pre id="live-output">' + esc(live.output_tail) + '</pre>' : '') + '</div>';
    tick();
  }
  function tick() {
    var el = document.getElementById('live-elapsed');
    if (el) el.textContent = secs(Date.now() / 1000 - Number(el.getAttribute('data-started')));
  }

  function pollRun(id) {
    var fresh = !run || run.id !== id;
    if (fresh) run = {id: id, summary: null, steps: [], calls: [], started: null, detailJson: '', liveJson: '', step: 0, follow: true};
    var r = run, p = params();
    r.follow = !p.step;
    if (p.step) r.step = parseInt(p.step, 10) || 1;
    var url = '/api/run?id=' + encodeURIComponent(id) + '&have_steps=' + r.steps.length + '&have_calls=' + r.calls.length +
      (r.started === null ? '' : '&started=' + r.started);
    return getJson(url).then(function (d) {
      if (run !== r) return;
      if (d.steps_from === 0) { r.steps = []; }
      if (d.calls_from === 0) { r.calls = []; }
      r.steps = r.steps.slice(0, d.steps_from).concat(d.steps);
      d.calls.forEach(function (c, i) { c.n = d.calls_from + i; });
      r.calls = r.calls.slice(0, d.calls_from).concat(d.calls);
      r.started = d.summary.started_at === undefined ? null : d.summary.started_at;
      r.config = d.config; r.warnings = d.warnings; r.errors_log = d.errors_log; r.graph = d.graph;
      var live = d.summary.live; d.summary.live = null;
      var key = JSON.stringify([d.summary, r.steps.length, r.calls.length, r.step, r.follow, r.errors_log, d.scores, d.graph]);
      d.summary.live = live; r.summary = d.summary;
      if (d.scores) r.steps.forEach(function (s) { if (d.scores[s.index] !== undefined) s.score = d.scores[s.index]; });
      if (key !== r.detailJson) { r.detailJson = key; r.liveJson = JSON.stringify(live); drawRun(); }
      else if (JSON.stringify(live) !== r.liveJson) { r.liveJson = JSON.stringify(live); drawLive(); }
    }).catch(function (e) {
      if (run === r && String(e).indexOf('404') >= 0) document.getElementById('viewer').innerHTML = '<p class="err">No run ' + esc(id) + ' here.</p>';
      else throw e;
    });
  }
  function poll() {
    var id = params().run;
    var jobs = [getJson('/api/runs').then(function (data) {
      var j = JSON.stringify([data, id]);
      if (j !== listJson) { listJson = j; drawList(data); }
    })];
    if (id) jobs.push(pollRun(id));
    else if (run) { run = null; document.getElementById('viewer').innerHTML = '<p class="muted">Choose a run on the left.</p>'; }
    Promise.all(jobs).then(function () {
      document.getElementById('conn').textContent = 'live: updated ' + new Date().toLocaleTimeString();
    }, function (e) {
      document.getElementById('conn').textContent = 'cannot reach the viewer (' + e + '); retrying';
    }).then(function () { setTimeout(poll, POLL_MS); });
  }
  window.addEventListener('hashchange', function () {
    var p = params();
    listJson = '';
    if (run && p.run === run.id && run.summary) {  // another step of the same run: no need to wait for the poll
      run.follow = !p.step; run.step = p.step ? parseInt(p.step, 10) || 1 : run.steps.length;
      run.detailJson = ''; drawRun();
    }
  });
  document.addEventListener('keydown', function (ev) {
    if (!run || !run.steps.length) return;
    var step = run.step || run.steps.length;
    if (ev.key === 'ArrowRight' && step < run.steps.length) go(run.id, step + 1);
    else if (ev.key === 'ArrowLeft' && step > 1) go(run.id, step - 1);
  });
  setInterval(tick, 1000);
  poll();
})();
