// The run viewer of both `mlab view` (live: it polls the server's JSON API) and the static report of `mlab report`
// (its data in data.js beside the page, each run's detail in runs/<file>.js, loaded when the run is opened).
// Run and bench folders are untrusted: everything drawn from them enters the page as text nodes or attribute
// values set through the DOM, never as markup (no innerHTML anywhere), and both pages forbid inline script and
// style by their Content-Security-Policy.
(function () {
  'use strict';
  var SVG_NS = 'http://www.w3.org/2000/svg';

  // ---- building the DOM ------------------------------------------------------------------------------------
  function add(node, kids) {
    (Array.isArray(kids) ? kids : [kids]).forEach(function (k) {
      if (k === null || k === undefined || k === false) return;
      if (Array.isArray(k)) add(node, k);
      else node.appendChild(typeof k === 'object' ? k : document.createTextNode(String(k)));
    });
    return node;
  }
  function attrs(node, a) {
    Object.keys(a || {}).forEach(function (k) {
      if (a[k] !== null && a[k] !== undefined && a[k] !== false) node.setAttribute(k, String(a[k]));
    });
    return node;
  }
  // el('td', {class: 'x'}, 'text', child, [more]): strings become text nodes
  function el(tag, a) { return add(attrs(document.createElement(tag), a), [].slice.call(arguments, 2)); }
  function svg(tag, a) { return add(attrs(document.createElementNS(SVG_NS, tag), a), [].slice.call(arguments, 2)); }
  function fill(node, kids) { node.replaceChildren(); return add(node, [kids]); }
  function byId(id) { return document.getElementById(id); }

  // ---- formatting --------------------------------------------------------------------------------------------
  function isNum(v) { return typeof v === 'number' && isFinite(v); }
  function given(v) { return v !== null && v !== undefined; }
  // A number as digits; whatever a folder put in its place is shown as the text it is.
  function num(v, digits) { return isNum(v) ? v.toPrecision(digits || 5) : given(v) ? String(v) : '-'; }
  function pct(v) { return isNum(v) ? (v >= 0 ? '+' : '') + (100 * v).toFixed(1) + '%' : given(v) ? String(v) : '-'; }
  function secs(v) {
    if (!isNum(v)) return given(v) ? String(v) : '-';
    v = Math.max(0, v);
    return v < 60 ? v.toFixed(1) + ' s' : v < 3600 ? Math.floor(v / 60) + ' min ' + Math.round(v % 60) + ' s' :
      Math.floor(v / 3600) + ' h ' + Math.round((v % 3600) / 60) + ' min';
  }
  function text(v) { return given(v) ? String(v) : ''; }
  function json(v) { return typeof v === 'string' ? v : JSON.stringify(v, null, 1); }
  function costText(s) { return s && s.cost_text ? String(s.cost_text) : '-'; }  // "unknown" without a price, never $0
  function callCost(c) { return isNum(c.cost_usd) ? '$' + c.cost_usd.toFixed(5) : c.error ? '-' : 'unknown'; }
  function badge(status, id) { return el('span', {id: id, class: 'badge st-' + text(status).replace(/[^a-z]/g, '')}, text(status)); }

  // ---- where the data comes from -----------------------------------------------------------------------------
  function getJson(url) {
    return fetch(url, {cache: 'no-store'}).then(function (r) {
      if (r.status === 404) { var e = new Error('no such run'); e.notFound = true; throw e; }
      if (!r.ok) throw new Error(r.status + ' ' + r.statusText);
      return r.json();
    });
  }
  function liveSource() {
    var meta = document.querySelector('meta[name="mlab-poll-ms"]');
    return {
      live: true, pollMs: (meta && parseInt(meta.content, 10)) || 1000,
      list: function () { return getJson('/api/runs'); },
      run: function (id, r) {
        return getJson('/api/run?id=' + encodeURIComponent(id) + '&have_steps=' + r.steps.length + '&have_calls=' +
                       r.calls.length + (r.started === null ? '' : '&started=' + r.started));
      }
    };
  }
  function staticSource(data) {
    var loaded = {}, waiting = {};
    window.MLAB_RUN = function (file, detail) {
      loaded[file] = detail; (waiting[file] || []).forEach(function (w) { w[0](detail); }); delete waiting[file];
    };
    function entry(id) { return data.runs.filter(function (r) { return r.id === id || r.key === id; })[0]; }
    return {
      live: false, list: function () { return Promise.resolve(data); }, entry: entry,
      run: function (id) {
        var r = entry(id);
        if (!r) { var e = new Error('no such run'); e.notFound = true; return Promise.reject(e); }
        if (!r.file || !/^r[0-9]+$/.test(r.file)) {
          return Promise.resolve({summary: r, steps_from: 0, steps: [], calls_from: 0, calls: [], no_trace: true});
        }
        if (loaded[r.file]) return Promise.resolve(loaded[r.file]);
        return new Promise(function (resolve, reject) {
          if (waiting[r.file]) { waiting[r.file].push([resolve, reject]); return; }
          waiting[r.file] = [[resolve, reject]];
          var s = document.createElement('script');
          s.src = 'runs/' + r.file + '.js';
          s.onerror = function () {
            (waiting[r.file] || []).forEach(function (w) { w[1](new Error('cannot load runs/' + r.file + '.js')); });
            delete waiting[r.file];
          };
          document.head.appendChild(s);
        });
      }
    };
  }
  var source = window.MLAB_DATA ? staticSource(window.MLAB_DATA) : liveSource();

  // ---- routing: #run=ID&step=N --------------------------------------------------------------------------------
  function params() {
    var out = {};
    location.hash.replace(/^#/, '').split('&').forEach(function (kv) {
      var i = kv.indexOf('=');
      if (i > 0) { try { out[kv.slice(0, i)] = decodeURIComponent(kv.slice(i + 1)); } catch (e) { /* not ours */ } }
    });
    return out;
  }
  function runHash(id, step) { return '#run=' + encodeURIComponent(id) + (step ? '&step=' + step : ''); }
  function go(id, step) { location.hash = runHash(id, step); }

  var list = null, listKey = '', shownKey = '', run = null;  // run: the run shown, with what was fetched of it

  // ---- the run list and the bench overview: filtered by #filter, sorted by a column header --------------------
  var sorts = {runs: {key: null, down: false}, groups: {key: 'group', down: false}};
  function describe(r) {
    return [r.task, r.agent, r.llm, given(r.seed) ? 'seed ' + r.seed : null].filter(given).map(text).join(' · ');
  }
  function terms() {
    var f = byId('filter');
    return f ? f.value.toLowerCase().split(/\s+/).filter(Boolean) : [];
  }
  // The method as reports name it (--label; the report's data names every run's), else the agent.
  function methodOf(r) { return given(r.method) && r.method !== '' ? text(r.method) : text(r.agent); }
  function matches(r, words) {
    var hay = [r.name, r.task, r.agent, r.llm, r.method, given(r.seed) ? 'seed ' + r.seed : null, r.status, r.failure]
      .map(text).join(' ').toLowerCase();
    return words.every(function (w) { return hay.indexOf(w) >= 0; });
  }
  // Sort values: numbers and text, missing ones last whichever way the column is sorted.
  function compare(a, b, down) {
    var ma = !given(a) || a === '', mb = !given(b) || b === '';
    if (ma || mb) return ma === mb ? 0 : ma ? 1 : -1;
    var c = isNum(a) && isNum(b) ? a - b : String(a).localeCompare(String(b), undefined, {numeric: true});
    return down ? -c : c;
  }
  function sorted(rows, which, columns) {
    var st = sorts[which], col = columns.filter(function (c) { return c.key === st.key; })[0];
    if (!col) return rows;
    return rows.map(function (r, i) { return [r, i]; }).sort(function (x, y) {
      return compare(col.value(x[0]), col.value(y[0]), st.down) || x[1] - y[1];
    }).map(function (x) { return x[0]; });
  }
  function header(which, columns) {
    var st = sorts[which];
    return el('tr', null, columns.map(function (c) {
      var on = st.key === c.key;
      return el('th', {'data-sort': c.key, 'data-table': which, class: on ? (st.down ? 'sorted down' : 'sorted up') : 'sortable',
                       title: 'sort by ' + c.title}, c.title, on ? (st.down ? ' ▼' : ' ▲') : '');
    }));
  }
  function successText(v) { return v === true ? 'yes' : v === false ? 'no' : given(v) ? text(v) : '-'; }
  // a run still going has no success yet: "no" would read as a verdict
  function judgedRun(r) { return r.status !== 'running' && typeof r.success === 'boolean'; }
  function runSuccess(r) { return r.status === 'running' ? '-' : successText(r.success); }
  var RUN_COLUMNS = [
    {key: 'name', title: 'run', value: function (r) { return r.name; }},
    {key: 'status', title: 'status', value: function (r) { return r.status; }},
    {key: 'steps', title: 'steps', value: function (r) { return r.steps; }},
    {key: 'score', title: 'score', value: function (r) { return r.final_score; }},
    {key: 'improvement', title: 'improvement', value: function (r) { return r.improvement; }, judged: true},
    {key: 'success', title: 'success', value: function (r) { return r.success === true ? 1 : r.success === false ? 0 : r.success; }, judged: true},
    {key: 'cost', title: 'cost', value: function (r) { return isNum(r.cost_usd) ? r.cost_usd : r.cost_text; }}];
  function drawList(data) {
    var title = byId('title');
    if (title && source.live) title.textContent = 'mlab view — ' + text(data.root) + (data.bench ? ' (bench)' : '');
    var none = byId('no-runs');
    if (none) none.hidden = data.runs.length > 0;
    var judged = data.runs.some(function (r) { return 'improvement' in r; });
    var columns = RUN_COLUMNS.filter(function (c) { return judged || !c.judged; });
    var words = terms(), shown = sorted(data.runs.filter(function (r) { return matches(r, words); }), 'runs', columns);
    var rows = shown.map(function (r) {
      var steps = text(given(r.steps) ? r.steps : '-') + (r.max_steps ? '/' + text(r.max_steps) : '');
      // one line each for the name and what it ran, cut from the front (the seed is at the end), whole as a title
      return el('tr', {'data-id': given(r.id) ? r.id : null, class: run && r.id === run.id ? 'sel' : null},
        el('td', {class: 'name', title: text(r.name) + '\n' + describe(r) + (r.error ? '\n' + text(r.error) : '')},
           el('div', {class: 'cut'}, el('bdi', null, text(r.name))),
           el('div', {class: 'sub cut'}, el('bdi', null, describe(r), r.error ? [' ', el('span', {class: 'err'}, text(r.error))] : null))),
        el('td', null, badge(r.status), r.failure ? el('div', {class: 'sub'}, text(r.failure)) : null),
        el('td', null, steps, r.live ? [' ', el('span', {class: 'sub'}, '+1')] : null),
        el('td', null, num(r.final_score)),
        // a success against a placeholder baseline says only that the submission is valid: marked, the note as its title
        judged ? [el('td', null, pct(r.improvement)),
                  el('td', {title: r.baseline_note || null}, runSuccess(r), r.baseline_note ? '*' : null)] : null,
        el('td', null, costText(r)));
    });
    var count = byId('shown');
    if (count) count.textContent = words.length ? shown.length + ' of ' + data.runs.length + ' runs' : data.runs.length + ' runs';
    fill(byId('runs'), el('table', {class: 'runs'}, el('thead', null, header('runs', columns)), el('tbody', null, rows)));
  }
  // A bench at a glance: one row per task × agent × model, over the runs the filter keeps.
  var GROUP_COLUMNS = [
    {key: 'group', title: 'task · agent · model', value: function (g) { return g.label; }},
    {key: 'runs', title: 'runs', value: function (g) { return g.runs.length; }},
    {key: 'status', title: 'status', value: function (g) { return g.statusText; }},
    {key: 'success', title: 'success', value: function (g) { return g.judged ? g.successes / g.judged : null; }},
    {key: 'improvement', title: 'mean improvement', value: function (g) { return g.improvement; }},
    {key: 'score', title: 'mean score', value: function (g) { return g.score; }},
    {key: 'cost', title: 'cost', value: function (g) { return g.cost; }},
    {key: 'method', title: 'method', value: function (g) { return g.method; }}];
  function mean(values) {
    var v = values.filter(isNum);
    return v.length ? v.reduce(function (a, b) { return a + b; }, 0) / v.length : null;
  }
  function groups(runs) {
    var by = {}, order = [];
    runs.forEach(function (r) {
      // two methods of one agent and model (two --label names) are two groups
      var parts = [r.task, r.agent, r.llm].filter(given).map(text), k = JSON.stringify(parts.concat([methodOf(r)]));
      if (!by[k]) {
        by[k] = {label: parts.join(' · '), filter: parts.join(' '), method: methodOf(r), runs: []};
        order.push(k);
      }
      by[k].runs.push(r);
    });
    return order.map(function (k) {
      var g = by[k], counts = {};
      g.runs.forEach(function (r) { counts[text(r.status)] = (counts[text(r.status)] || 0) + 1; });
      g.statusText = Object.keys(counts).sort().map(function (s) { return counts[s] + ' ' + s; }).join(', ');
      g.judged = g.runs.filter(judgedRun).length;
      g.successes = g.runs.filter(function (r) { return judgedRun(r) && r.success === true; }).length;
      g.improvement = mean(g.runs.map(function (r) { return r.improvement; }));
      g.score = mean(g.runs.map(function (r) { return r.final_score; }));
      // the priced part, and whether some calls had no price: unpriced runs cost "unknown" (as a run's cell), never $0
      var calls = 0, unpriced = 0, priced = [];
      g.runs.forEach(function (r) {
        calls += r.calls || 0; unpriced += r.unpriced_calls || 0;
        if (isNum(r.cost_usd) && (r.calls || 0) > (r.unpriced_calls || 0)) priced.push(r.cost_usd);
      });
      g.cost = priced.length ? priced.reduce(function (a, b) { return a + b; }, 0) : null;
      g.costText = !calls ? '-' : unpriced >= calls ? 'unknown' : '$' + (g.cost || 0).toFixed(4) + (unpriced ? ' + unknown' : '');
      return g;
    });
  }
  function overview() {
    if (!list) return null;
    var words = terms(), runs = list.runs.filter(function (r) { return matches(r, words); });
    var rows = sorted(groups(runs), 'groups', GROUP_COLUMNS).map(function (g) {
      return el('tr', {'data-filter': g.filter, title: 'show only these runs'},
        el('td', null, g.label), el('td', null, String(g.runs.length)), el('td', null, g.statusText),
        el('td', null, g.judged ? g.successes + '/' + g.judged + ' (' + Math.round(100 * g.successes / g.judged) + '%)' : '-'),
        el('td', null, pct(g.improvement)), el('td', null, num(g.score)),
        el('td', null, g.costText), el('td', {class: 'method'}, g.method));
    });
    return el('div', {id: 'overview'}, el('h2', null, list.bench ? 'Bench overview' : 'Overview'),
      el('p', {class: 'muted'}, runs.length + ' run(s) in ' + rows.length + ' group(s) of task × agent × model' +
         (words.length ? ' (filtered)' : '') + '. Click a group to list only its runs, a run to open it, a header to sort.'),
      el('table', {id: 'groups', class: 'runs'}, el('thead', null, header('groups', GROUP_COLUMNS)), el('tbody', null, rows)));
  }
  function redrawLists() {
    if (!list) return;
    drawList(list);
    if (!run && source.live) fill(byId('viewer'), overview());
  }
  document.addEventListener('click', function (ev) {
    var th = ev.target.closest('th[data-sort]');
    if (th) {
      var st = sorts[th.getAttribute('data-table')], key = th.getAttribute('data-sort');
      st.down = st.key === key ? !st.down : key !== 'name' && key !== 'group' && key !== 'status';
      st.key = key; redrawLists(); return;
    }
    var g = ev.target.closest('#groups tr[data-filter]');
    if (g) { byId('filter').value = g.getAttribute('data-filter'); redrawLists(); return; }
    var tr = ev.target.closest('#runs tr[data-id]'); if (tr) go(tr.getAttribute('data-id'));
  });
  if (byId('filter')) byId('filter').addEventListener('input', redrawLists);

  // ---- one run -----------------------------------------------------------------------------------------
  function chart() {
    var pts = [], s = run.summary, base = run.baseline, placeholder = isNum(base) && !!s.baseline_note;
    run.steps.forEach(function (x) { if (isNum(x.score)) pts.push([x.index, x.score]); });
    if (isNum(s.final_score) && s.status !== 'running') pts.push([run.steps.length, s.final_score]);
    if (!pts.length) {
      return el('p', {class: 'muted', id: 'score-chart'}, 'No scores yet: the final score comes when the run ends; ' +
                'scores after each step come from a bench run with --intermediate (or mlab eval --intermediate).');
    }
    var W = 560, H = 180, P = 36, xs = pts.map(function (p) { return p[0]; });
    // a placeholder baseline (1e10) would flatten the scores onto the floor: it is named, not drawn
    var ys = pts.map(function (p) { return p[1]; }).concat(isNum(base) && !placeholder ? [base] : []);
    var x1 = Math.max.apply(null, xs.concat([run.steps.length, 1])), y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    var pad = (y1 - y0) * 0.08 || Math.abs(y0) * 0.1 || 1; y0 -= pad; y1 += pad;
    function X(v) { return P + (W - 2 * P) * v / x1; }
    function Y(v) { return H - P + (2 * P - H) * (v - y0) / (y1 - y0); }
    var g = svg('svg', {id: 'score-chart', class: 'chart', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H});
    add(g, [svg('line', {x1: P, x2: W - P, y1: H - P, y2: H - P, class: 'axis'}),
            svg('line', {x1: P, x2: P, y1: P, y2: H - P, class: 'axis'})]);
    var every = Math.max(1, Math.ceil(x1 / 10));  // at most about ten ticks on the steps axis
    for (var t = 0; t <= x1; t += every) {
      add(g, [svg('line', {x1: X(t), x2: X(t), y1: H - P, y2: H - P + 4, class: 'axis'}),
              svg('text', {x: X(t), y: H - P + 15, 'text-anchor': 'middle'}, String(t))]);
    }
    if (placeholder) {
      add(g, svg('text', {x: W - P, y: P - 6, 'text-anchor': 'end'}, 'baseline ' + num(base, 4) + ' (a placeholder): off the chart'));
    } else if (isNum(base)) {
      add(g, [svg('line', {x1: P, x2: W - P, y1: Y(base), y2: Y(base), class: 'baseline'}),
              svg('text', {x: W - P, y: Y(base) - 3, 'text-anchor': 'end'}, 'baseline ' + num(base, 4))]);
    }
    add(g, svg('polyline', {class: 'scores', points: pts.map(function (p) { return X(p[0]) + ',' + Y(p[1]); }).join(' ')}));
    pts.forEach(function (p) {
      var cur = p[0] === run.step;
      add(g, svg('circle', {cx: X(p[0]), cy: Y(p[1]), r: cur ? 5 : 3, class: cur ? 'cur' : null},
                 svg('title', null, 'step ' + p[0] + ': ' + num(p[1]))));
    });
    add(g, [svg('text', {x: 2, y: P + 4}, num(y1, 4)), svg('text', {x: 2, y: H - P}, num(y0, 4)),
            svg('text', {x: W - P, y: H - 4, 'text-anchor': 'end'}, 'steps'),
            svg('text', {x: P, y: 12}, 'score')]);
    return g;
  }
  function diff(textValue) {
    return el('pre', null, text(textValue).split('\n').map(function (l, i) {
      var c = l.indexOf('+') === 0 ? 'add' : l.indexOf('-') === 0 ? 'del' : l.indexOf('@@') === 0 ? 'hunk' : null;
      return [i ? '\n' : '', c ? el('span', {class: c}, l) : l];
    }));
  }
  function callsTable(calls, id) {
    if (!calls.length) return el('p', {class: 'muted', id: id}, 'No model calls.');
    return el('table', {id: id}, el('thead', null, el('tr', null, ['#', 'step', 'role', 'model', 'prompt tokens',
      'completion tokens', 'cost', 'latency', ''].map(function (h) { return el('th', null, h); }))),
      el('tbody', null, calls.map(function (c) {
        return el('tr', null, el('td', null, String(c.n + 1)), el('td', null, given(c.step) ? text(c.step) : '-'),
          el('td', null, text(c.role)), el('td', null, text(c.model)), el('td', null, text(c.prompt_tokens)),
          el('td', null, text(c.completion_tokens)), el('td', {class: 'cost'}, callCost(c)),
          el('td', null, secs(c.latency_s), c.cached ? ' (cached)' : ''),
          el('td', null, c.error ? el('span', {class: 'err'}, text(c.error)) : null,
             el('details', null, el('summary', null, 'messages'), (c.messages || []).map(function (m) {
               return [el('b', null, text(m.role)), el('pre', null, text(m.content))];
             }), Object.keys(c.params || {}).length ? [el('b', null, 'params'), el('pre', null, JSON.stringify(c.params))] : null,
             el('b', null, 'completion'), el('pre', null, given(c.completion) ? text(c.completion) : '(none)'))));
      })));
  }
  // A search agent's solution graph (its state's "graph"): a node per row, the best one marked.
  function graphTable(g) {
    if (!g || !g.nodes || !g.nodes.length) return null;
    return [el('h3', null, 'Solution graph'), el('p', {class: 'muted'}, 'fitness: ' + text(g.direction) +
      ' is better; * marks the best node'), el('table', {id: 'solution-graph'}, el('thead', null, el('tr', null,
      ['node', 'parents', 'operator', 'status', 'fitness', 'best', 'plan'].map(function (h) { return el('th', null, h); }))),
      el('tbody', null, g.nodes.map(function (x) {
        return el('tr', null, el('td', null, text(x.node)), el('td', null, json(x.parents)), el('td', null, text(x.operator)),
          el('td', null, text(x.status)), el('td', null, num(x.fitness)), el('td', null, x.best ? '*' : ''),
          el('td', null, text(x.plan)));
      })))];
  }
  function toolCalls(calls) {
    // the tools the model called in this step (a program agent's model call), each with its arguments
    if (!Array.isArray(calls) || !calls.length) return null;
    return [el('h4', null, 'Tool calls'), el('table', {id: 'step-tool-calls'}, calls.map(function (c) {
      return el('tr', null, el('th', null, text(c && c.name)), el('td', null, el('pre', null, text(c && c.arguments))),
        el('td', {class: 'muted'}, text(c && c.id)));
    }))];
  }
  function stepView(st, n) {
    // the agent's own copy of the action and its input (a ReAct response's "Action" and "Action Input") is shown
    // once, under Action input
    var argsJson = JSON.stringify(st.args), keys = Object.keys(st.entries || {}).filter(function (k) {
      var v = st.entries[k];
      return !(v === st.action || (v !== null && typeof v === 'object' && JSON.stringify(v) === argsJson));
    });
    var changes = st.changes || [];
    return el('div', {id: 'step', 'data-step': st.index},
      el('h3', null, 'Step ' + text(st.index) + ' of ' + n + ': ', el('span', {id: 'step-action'}, text(st.action)),
         st.is_error ? [' ', el('span', {class: 'err'}, '(error)')] : null),
      el('p', {class: 'muted'}, secs(st.duration_s) + '; ' + text(st.tokens) + ' tokens so far',
         isNum(st.score) ? ['; score after this step ', el('b', null, num(st.score))] : null,
         st.score_error ? ['; ', el('span', {class: 'err'}, text(st.score_error))] : null),
      keys.length ? [el('h4', null, 'Reasoning'), el('table', {id: 'step-thought'}, keys.map(function (k) {
        return el('tr', null, el('th', null, k), el('td', null, el('pre', null, json(st.entries[k]))));
      }))] : null,
      el('h4', null, 'Action input'), el('pre', {id: 'step-args'}, json(st.args)),
      toolCalls(st.args && st.args.tool_calls),
      el('h4', null, 'Observation'), el('pre', {id: 'step-observation', class: st.is_error ? 'err' : null}, text(st.observation)),
      el('h4', null, 'Files changed'), changes.length ? el('div', {id: 'step-diff'}, changes.map(function (c) {
        return [el('p', null, el('b', null, text(c.file)), ' ', text(c.change)), diff(c.diff)];
      })) : el('p', {class: 'muted', id: 'step-diff'}, 'none'),
      el('h4', null, 'Model calls in this step'),
      callsTable(run.calls.filter(function (c) { return c.step === st.index; }), 'step-calls'));
  }
  function drawRun() {
    var s = run.summary, n = run.steps.length, cfg = run.config || {};
    if (run.follow || run.step > n) run.step = n;
    if (run.step < 1 && n) run.step = 1;
    var facts = [cfg.task || s.task, cfg.agent || s.agent, (cfg.llm || s.llm) ? 'model ' + text(cfg.llm || s.llm) : null,
                 given(cfg.seed) ? 'seed ' + text(cfg.seed) : given(s.seed) ? 'seed ' + text(s.seed) : null,
                 cfg.sandbox ? 'sandbox ' + text(cfg.sandbox) : null].filter(given).map(text).join(' · ');
    var st = run.steps[run.step - 1], method = given(s.method) && s.method !== '' ? s.method : cfg.label;
    var kids = [
      el('h2', {id: 'run-title'}, text(s.name)),
      el('p', null, badge(text(s.status) + (s.end_reason ? ': ' + text(s.end_reason) : ''), 'run-status')),
      given(method) && method !== '' ? el('p', {id: 'run-method'}, 'method ', el('b', null, text(method))) : null,
      el('p', null, facts),
      run.hardware ? el('p', {id: 'run-hardware'}, 'hardware ' + text(run.hardware)) : null,
      el('p', null, 'final score ', el('b', {id: 'run-score'}, num(s.final_score)),
         s.final_score_error ? [' ', el('span', {class: 'err'}, text(s.final_score_error))] : null,
         'improvement' in s ? ['; improvement ', el('b', {id: 'run-improvement'}, pct(s.improvement))] : null,
         isNum(s.of_reference) ? ['; ', el('b', {id: 'run-of-reference'}, num(s.of_reference, 3)), ' of reference'] :
           isNum(s.final_score) && 'of_reference' in s ? ['; of reference ', el('b', {id: 'run-no-reference'}, '-'), ' ',
             el('span', {class: 'muted', id: 'run-reference-hint'}, '(no reference score recorded: mlab check-task ' +
                text(cfg.task_folder || cfg.task || s.task) + ')')] : null,
         ' · ' + n + (s.max_steps ? '/' + text(s.max_steps) : '') + ' steps · ' + text(s.tokens || 0) + ' tokens · cost ',
         el('span', {id: 'run-cost'}, s.calls ? costText(s) : 'none (no model calls)'),
         s.calls && s.unpriced_calls >= s.calls ? [' ', el('span', {class: 'muted'}, '(no call has a price)')] : null,
         ' · ', el('span', {id: 'run-time', 'data-started': s.status === 'running' && isNum(s.started_at) ? s.started_at : null},
                   secs(s.time_s))),
      s.baseline_note ? el('p', {id: 'run-baseline-note', class: 'muted'}, 'note: ' + text(s.baseline_note)) : null,
      el('div', {id: 'live-box'}),
      run.no_trace ? el('p', {class: 'muted'}, 'This run has no trace to show.') : null,
      chart(), graphTable(run.graph),
      el('div', {id: 'steps'}, run.steps.map(function (x) {
        return el('button', {'data-step': x.index, title: text(x.action),
                             class: [x.index === run.step ? 'cur' : '', x.is_error ? 'bad' : ''].join(' ').trim() || null},
                  text(x.index));
      }), run.follow || !source.live ? null : [' ', el('a', {id: 'follow', href: runHash(run.id)}, 'follow the latest step')]),
      st ? stepView(st, n) : el('p', {class: 'muted', id: 'no-steps'}, 'No steps yet.'),
      el('h3', null, 'All model calls'),
      el('details', null, el('summary', null, run.calls.length + ' calls'), callsTable(run.calls, 'all-calls')),
      (run.warnings || []).length ? [el('h3', null, 'Warnings'), el('pre', {id: 'warnings'}, run.warnings.map(text).join('\n'))] : null,
      run.errors_log ? [el('h3', null, 'errors.log'), el('pre', {class: 'err', id: 'errors-log'}, text(run.errors_log))] : null];
    fill(byId('viewer'), kids);
    drawLive();
  }
  byId('viewer').addEventListener('click', function (ev) {
    var b = ev.target.closest('#steps button[data-step]'); if (b && run) go(run.id, b.getAttribute('data-step'));
  });
  function drawLive() {
    var box = byId('live-box'); if (!box) return;
    var live = run && run.summary.live;
    if (!live) { fill(box, null); return; }
    var args = Object.keys(live.args || {}).map(function (k) { return k + '=' + text(live.args[k]); }).join(', ');
    fill(box, el('div', {id: 'live'}, el('b', null, 'Step ' + text(live.step) + ' in progress:'), ' ',
      el('span', {id: 'live-action'}, given(live.action) ? text(live.action) + (args ? ' (' + args + ')' : '') : 'waiting for the agent'),
      ' — ', el('span', {id: 'live-elapsed', 'data-started': isNum(live.started) ? live.started : 0}),
      live.output_tail ? el('pre', {id: 'live-output'}, text(live.output_tail)) : null));
    tick();
  }
  // Times that move while a run goes: the step in progress and the run's own (its header).
  function tick() {
    ['live-elapsed', 'run-time'].forEach(function (id) {
      var e = byId(id), started = e && parseFloat(e.getAttribute('data-started'));
      if (e && isNum(started)) e.textContent = secs(Date.now() / 1000 - started);
    });
  }

  // ---- fetching and redrawing only what changed --------------------------------------------------------------
  function pollRun(id) {
    if (!run || run.id !== id) run = {id: id, summary: null, steps: [], calls: [], started: null, detailKey: '', liveKey: '', step: 0, follow: true};
    var r = run, p = params();
    r.follow = !p.step;
    if (p.step) r.step = parseInt(p.step, 10) || 1;
    return source.run(id, r).then(function (d) {
      if (run !== r) return;
      r.steps = r.steps.slice(0, d.steps_from || 0).concat(d.steps || []);
      (d.calls || []).forEach(function (c, i) { c.n = (d.calls_from || 0) + i; });
      r.calls = r.calls.slice(0, d.calls_from || 0).concat(d.calls || []);
      r.started = isNum(d.summary.started_at) ? d.summary.started_at : null;
      r.config = d.config; r.warnings = d.warnings; r.errors_log = d.errors_log; r.graph = d.graph;
      r.no_trace = !!d.no_trace; r.baseline = given(d.baseline) ? d.baseline : d.summary.baseline;
      var live = d.summary.live; d.summary.live = null;
      var key = JSON.stringify([d.summary, r.steps.length, r.calls.length, r.step, r.follow, r.errors_log, d.scores, d.graph]);
      d.summary.live = live; r.summary = d.summary;
      if (d.scores) r.steps.forEach(function (s) { if (d.scores[s.index] !== undefined) s.score = d.scores[s.index]; });
      if (key !== r.detailKey) { drawRun(); r.detailKey = key; r.liveKey = JSON.stringify(live); }
      else if (JSON.stringify(live) !== r.liveKey) { r.liveKey = JSON.stringify(live); drawLive(); }
    }, function (e) {
      if (run === r && e.notFound) fill(byId('viewer'), el('p', {class: 'err'}, 'No run ' + id + ' here.'));
      else throw e;
    });
  }
  function chosen() {
    var id = params().run;
    if (id) return id;
    // a single run opens on itself
    var ids = list ? list.runs.filter(function (r) { return given(r.id); }) : [];
    return list && list.runs.length === 1 && ids.length === 1 ? ids[0].id : null;
  }
  function markChosen() {
    document.querySelectorAll('#runs tr.sel').forEach(function (tr) { tr.classList.remove('sel'); });
    document.querySelectorAll('#runs tr[data-id]').forEach(function (tr) {
      if (run && tr.getAttribute('data-id') === run.id) tr.classList.add('sel');
    });
  }
  function refresh() {
    return source.list().then(function (data) {
      var k = JSON.stringify(data);
      if (k !== listKey) { listKey = k; list = data; drawList(data); }
      var id = chosen();
      if (!id) {
        if (run || !byId('viewer').firstChild || k !== shownKey) {
          run = null; shownKey = k;
          fill(byId('viewer'), source.live ? overview() : null);
        }
        return null;
      }
      return pollRun(id).then(markChosen);
    });
  }
  function poll() {
    refresh().then(function () {
      byId('conn').textContent = 'live: updated ' + new Date().toLocaleTimeString();
    }, function (e) {
      byId('conn').textContent = 'cannot reach the viewer (' + e + '); retrying';
    }).then(function () { setTimeout(poll, source.pollMs); });
  }
  window.addEventListener('hashchange', function () {
    var p = params();
    if (run && p.run === run.id && run.summary) {  // another step of the same run: no need to fetch
      run.follow = !p.step; run.step = p.step ? parseInt(p.step, 10) || 1 : run.steps.length;
      run.detailKey = ''; drawRun();
      return;
    }
    if (!source.live) {
      refresh().then(function () { if (run) byId('viewer').scrollIntoView(); },
                     function (e) { fill(byId('viewer'), el('p', {class: 'err'}, String(e.message || e))); });
    }
  });
  document.addEventListener('keydown', function (ev) {
    if (!run || !run.steps.length) return;
    var step = run.step || run.steps.length;
    if (ev.key === 'ArrowRight' && step < run.steps.length) go(run.id, step + 1);
    else if (ev.key === 'ArrowLeft' && step > 1) go(run.id, step - 1);
  });
  setInterval(tick, 1000);
  if (source.live) poll();
  else refresh().catch(function (e) { fill(byId('viewer'), el('p', {class: 'err'}, String(e.message || e))); });
})();
