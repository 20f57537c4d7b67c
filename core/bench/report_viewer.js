(function () {
  var runs = window.MLAB_REPORT.runs, loaded = {}, waiting = {};
  function esc(s) {
    return String(s === null || s === undefined ? '' : s).replace(/[&<>"]/g, function (c) {
      return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c];
    });
  }
  function fmt(v, digits) { return v === null || v === undefined ? '-' : Number(v).toPrecision(digits || 5); }
  function pct(v) { return v === null || v === undefined ? '-' : (v >= 0 ? '+' : '') + (100 * v).toFixed(1) + '%'; }
  function params() {
    var out = {};
    location.hash.replace(/^#/, '').split('&').forEach(function (kv) {
      var p = kv.split('='); if (p[0]) out[p[0]] = decodeURIComponent(p[1] || '');
    });
    return out;
  }
  function go(run, step) { location.hash = 'run=' + run + (step ? '&step=' + step : ''); }
  window.MLAB_LOADED = function (id, data) {
    loaded[id] = data; (waiting[id] || []).forEach(function (f) { f(data); }); delete waiting[id];
  };
  function load(id, done) {
    if (loaded[id]) return done(loaded[id]);
    if (waiting[id]) return waiting[id].push(done);
    waiting[id] = [done];
    var s = document.createElement('script'); s.src = 'runs/' + id + '.js';
    s.onerror = function () { document.getElementById('viewer').innerHTML = '<p class="err">cannot load runs/' + id + '.js</p>'; };
    document.head.appendChild(s);
  }
  function runTable() {
    var h = '<table class="runs"><thead><tr><th>task</th><th>agent</th><th>model</th><th>seed</th><th>status</th>' +
      '<th>failure</th><th>final score</th><th>improvement</th><th>steps</th><th>tokens</th><th>cost $</th><th>time s</th></tr></thead><tbody>';
    runs.forEach(function (r) {
      h += '<tr id="row-' + r.id + '" data-run="' + r.id + '"><td>' + esc(r.task) + '</td><td>' + esc(r.agent) + '</td><td>' +
        esc(r.llm || '-') + '</td><td>' + r.seed + '</td><td class="' + (r.status === 'failed' ? 'err' : '') + '">' +
        esc(r.status) + '</td><td>' + esc(r.failure || '') + '</td><td>' + fmt(r.final_score) + '</td><td>' + pct(r.improvement) +
        '</td><td>' + (r.steps === null ? '-' : r.steps) + '</td><td>' + (r.tokens || 0) + '</td><td>' + fmt(r.cost_usd, 3) + '</td><td>' + fmt(r.time_s, 3) + '</td></tr>';
    });
    var el = document.getElementById('runs'); el.innerHTML = h + '</tbody></table>';
    el.onclick = function (ev) {
      var tr = ev.target.closest('tr[data-run]'); if (tr) go(tr.getAttribute('data-run'));
    };
  }
  function chart(run, data, current) {
    var pts = [];
    data.steps.forEach(function (s) { if (s.score !== null && s.score !== undefined) pts.push([s.index, s.score]); });
    if (data.final_score !== null && data.final_score !== undefined) pts.push([data.steps.length || 0, data.final_score]);
    if (!pts.length) return '<p class="muted" id="score-chart">No step scores: run <code>mlab eval --intermediate</code> for scores over steps.</p>';
    var W = 520, H = 160, P = 30, xs = pts.map(function (p) { return p[0]; }), ys = pts.map(function (p) { return p[1]; });
    if (run.baseline !== null && run.baseline !== undefined) ys.push(run.baseline);
    var x0 = 0, x1 = Math.max.apply(null, xs.concat([1])), y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    var pad = (y1 - y0) * 0.08 || Math.abs(y0) * 0.1 || 1;
    y0 -= pad; y1 += pad;
    function X(v) { return P + (W - 2 * P) * (v - x0) / (x1 - x0); }
    function Y(v) { return H - P + (2 * P - H) * (v - y0) / (y1 - y0); }
    var svg = '<svg id="score-chart" width="' + W + '" height="' + H + '" style="border:1px solid #ddd">';
    if (run.baseline !== null && run.baseline !== undefined)
      svg += '<line x1="' + P + '" x2="' + (W - P) + '" y1="' + Y(run.baseline) + '" y2="' + Y(run.baseline) + '" stroke="#999" stroke-dasharray="4"/>' +
        '<text x="' + (W - P) + '" y="' + (Y(run.baseline) - 3) + '" font-size="10" text-anchor="end">baseline</text>';
    svg += '<polyline fill="none" stroke="#1a73e8" points="' + pts.map(function (p) { return X(p[0]) + ',' + Y(p[1]); }).join(' ') + '"/>';
    pts.forEach(function (p) {
      svg += '<circle cx="' + X(p[0]) + '" cy="' + Y(p[1]) + '" r="' + (p[0] === current ? 5 : 3) + '" fill="' + (p[0] === current ? '#d93025' : '#1a73e8') + '"><title>step ' + p[0] + ': ' + p[1] + '</title></circle>';
    });
    svg += '<text x="' + P + '" y="12" font-size="10">' + esc(fmt(y1)) + '</text><text x="' + P + '" y="' + (H - 4) + '" font-size="10">' + esc(fmt(y0)) + '</text>';
    svg += '<text x="' + (W - P) + '" y="' + (H - 4) + '" font-size="10" text-anchor="end">step ' + x1 + '</text></svg>';
    return svg;
  }
  function diffHtml(text) {
    return text.split('\n').map(function (l) {
      var c = l.indexOf('+') === 0 ? 'add' : l.indexOf('-') === 0 ? 'del' : l.indexOf('@@') === 0 ? 'hunk' : '';
      return c ? '<span class="' + c + '">' + esc(l) + '</span>' : esc(l);
    }).join('\n');
  }
  function show(run, data, stepNo) {
    var n = data.steps.length, cur = Math.min(Math.max(stepNo || 1, 1), n), s = data.steps[cur - 1];
    var h = '<h2 id="run-title">Run ' + esc(run.key) + '</h2><p>status <b>' + esc(data.status) + '</b>: ' + esc(data.end_reason) +
      '; final score <b>' + fmt(data.final_score) + '</b>' + (data.final_score_error ? ' <span class="err">' + esc(data.final_score_error) + '</span>' : '') +
      '; improvement ' + pct(run.improvement) + '; ' + (data.usage.prompt_tokens + data.usage.completion_tokens) + ' tokens, cost <span id="run-cost">' +
      esc(data.cost_text) + '</span>, ' + fmt(data.time_s, 4) + ' s</p>' + chart(run, data, cur);
    h += '<div id="steps">';
    data.steps.forEach(function (x) {
      h += '<button data-step="' + x.index + '" class="' + (x.index === cur ? 'cur ' : '') + (x.is_error ? 'bad' : '') + '" title="' + esc(x.action) + '">' + x.index + '</button>';
    });
    h += '</div>';
    if (!s) { h += '<p class="muted">This run has no steps.</p>'; }
    else {
      h += '<div id="step" data-step="' + s.index + '"><h3>Step ' + s.index + ' of ' + n + ': <span id="step-action">' + esc(s.action) + '</span></h3>';
      h += '<p class="muted">' + s.duration_s + ' s; ' + s.tokens + ' tokens so far' + (s.score !== null && s.score !== undefined ? '; score after this step <b>' + fmt(s.score) + '</b>' : '') +
        (s.score_error ? '; <span class="err">' + esc(s.score_error) + '</span>' : '') + '</p>';
      var entries = Object.keys(s.entries || {});
      if (entries.length) {
        h += '<h4>Thought</h4><table id="step-thought">';
        entries.forEach(function (k) { h += '<tr><th>' + esc(k) + '</th><td><pre>' + esc(typeof s.entries[k] === 'string' ? s.entries[k] : JSON.stringify(s.entries[k], null, 1)) + '</pre></td></tr>'; });
        h += '</table>';
      }
      h += '<h4>Action input</h4><pre id="step-args">' + esc(JSON.stringify(s.args, null, 1)) + '</pre>';
      h += '<h4>Observation</h4><pre id="step-observation" class="' + (s.is_error ? 'err' : '') + '">' + esc(s.observation) + '</pre>';
      h += '<h4>Files changed</h4>';
      if (!s.changes.length) h += '<p class="muted" id="step-diff">none</p>';
      else h += '<div id="step-diff">' + s.changes.map(function (c) {
        return '<p><b>' + esc(c.file) + '</b> ' + esc(c.change) + '</p><pre>' + diffHtml(c.diff) + '</pre>';
      }).join('') + '</div>';
      h += '</div>';
    }
    if (data.errors_log) h += '<h4>errors.log</h4><pre class="err">' + esc(data.errors_log) + '</pre>';
    var v = document.getElementById('viewer'); v.innerHTML = h;
    v.querySelector('#steps').onclick = function (ev) {
      var b = ev.target.closest('button[data-step]'); if (b) go(run.id, b.getAttribute('data-step'));
    };
  }
  function route(ev) {
    var scroll = !!ev;  // a click or key, not the first load
    var p = params(), run = null;
    runs.forEach(function (r) { if (r.id === p.run || r.key === p.run) run = r; });
    document.querySelectorAll('tr.sel').forEach(function (tr) { tr.classList.remove('sel'); });
    if (!run) { document.getElementById('viewer').innerHTML = ''; return; }
    var row = document.getElementById('row-' + run.id); if (row) row.classList.add('sel');
    if (!run.has_trace) { document.getElementById('viewer').innerHTML = '<p class="muted">Run ' + esc(run.key) + ' has no trace.</p>'; return; }
    load(run.id, function (data) {
      show(run, data, parseInt(p.step || '1', 10));
      if (scroll) document.getElementById('viewer').scrollIntoView();
    });
  }
  document.addEventListener('keydown', function (ev) {
    var p = params(); if (!p.run) return;
    var step = parseInt(p.step || '1', 10);
    if (ev.key === 'ArrowRight') go(p.run, step + 1); else if (ev.key === 'ArrowLeft' && step > 1) go(p.run, step - 1);
  });
  window.addEventListener('hashchange', route);
  runTable(); route();
})();
