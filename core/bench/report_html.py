"""The static HTML report: summary tables, plots and a trace viewer that works from a file:// URL, no server.

index.html holds the summary and the viewer; each run's steps are in runs/<id>.js, loaded with a script tag
when the run is opened (file:// pages may load scripts, not fetch JSON), so a large bench opens quickly.
"""
from __future__ import annotations

import difflib
import html
import json
from pathlib import Path

from mlab.core.bench.metrics import SUCCESS, improvement
from mlab.core.bench.formatting import num, pct, signed_pct
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.run.trace import read_trace

MAX_OBSERVATION = 20_000
MAX_DIFF = 40_000
MAX_DIFFED_FILE = 400_000


def _js(value) -> str:
    """JSON safe to put inside a <script> element."""
    return (json.dumps(value, default=str).replace("</", "<\\/").replace("\u2028", "\\u2028")
            .replace("\u2029", "\\u2029"))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n… [{len(text) - limit} more characters not shown]"


def _text(store: SnapshotStore, entry: dict | None) -> str | None:
    if entry is None:
        return ""
    if entry["size"] > MAX_DIFFED_FILE:
        return None
    data = store.read_object(entry["sha256"])
    if b"\x00" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def file_changes(store: SnapshotStore, before: dict, after: dict) -> list[dict]:
    """Files a step added, removed or changed, with a unified diff where the file is text and not huge."""
    changes = []
    for rel in sorted(set(before) | set(after)):
        a, b = before.get(rel), after.get(rel)
        if a and b and a["sha256"] == b["sha256"]:
            continue
        kind = "added" if a is None else "deleted" if b is None else "modified"
        old, new = _text(store, a), _text(store, b)
        if old is None or new is None:
            diff = f"(binary or large file: {a['size'] if a else 0} → {b['size'] if b else 0} bytes)"
        else:
            diff = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                                fromfile=f"a/{rel}", tofile=f"b/{rel}"))
        changes.append({"file": rel, "change": kind, "diff": _clip(diff, MAX_DIFF)})
    return changes


def run_data(run_dir: Path, row: dict, scores: list[dict]) -> dict:
    """Everything the viewer shows of one run."""
    trace = read_trace(run_dir)
    store = SnapshotStore(run_dir)
    by_step = {s["step"]: s for s in scores}
    previous = store.manifest("step_0000") if store.has("step_0000") else {}
    steps = []
    for step in trace.steps:
        current = store.manifest(step.snapshot) if store.has(step.snapshot) else previous
        scored = by_step.get(step.index)
        steps.append({
            "index": step.index, "action": step.action.name, "args": step.action.args,
            "entries": step.action.entries, "observation": _clip(step.observation, MAX_OBSERVATION),
            "is_error": step.is_error, "duration_s": round(step.duration_s, 2), "tokens": step.usage.total_tokens,
            "cost_usd": step.usage.cost_usd, "score": scored["score"] if scored else None,
            "score_error": scored["error"] if scored else None, "changes": file_changes(store, previous, current)})
        previous = current
    return {"key": row["key"], "status": trace.status, "end_reason": trace.end_reason,
            "final_score": row["final_score"], "final_score_error": row["final_score_error"], "steps": steps,
            "usage": trace.usage.model_dump(), "time_s": trace.total_time_s, "errors_log": _errors(run_dir)}


def _errors(run_dir: Path) -> str:
    path = run_dir / "errors.log"
    return _clip(path.read_text(errors="replace"), 20_000) if path.is_file() else ""


def _table(headers: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def write_html(data, out_dir: Path, images: list[Path]) -> Path:
    runs_dir = out_dir / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    index = []
    for n, row in enumerate(data.rows, 1):
        rid = f"r{n:04d}"
        run_dir = data.bench_dir / row["run_dir"]
        has_trace = (run_dir / "trace.json").is_file()
        if has_trace:
            payload = run_data(run_dir, row, data.step_scores.get(row["key"], []))
            (runs_dir / f"{rid}.js").write_text(f"MLAB_LOADED({_js(rid)}, {_js(payload)});\n", encoding="utf-8")
        imp = improvement(row["final_score"], data.baselines.get(row["task"]), bool(row["higher_is_better"]))
        index.append({"id": rid, "key": row["key"], "task": row["task"], "agent": row["agent"], "llm": row["llm"],
                      "seed": row["seed"], "status": row["status"], "failure": row["failure"],
                      "end_reason": row["end_reason"], "final_score": row["final_score"], "improvement": imp,
                      "steps": row["steps"], "tokens": (row["prompt_tokens"] or 0) + (row["completion_tokens"] or 0),
                      "cost_usd": row["cost_usd"], "time_s": row["time_s"], "has_trace": has_trace,
                      "baseline": data.baselines.get(row["task"]),
                      "higher_is_better": bool(row["higher_is_better"]) if row["higher_is_better"] is not None else True})

    summary = _table(
        ["task", "agent", "baseline", "runs", "failed", f"success >{SUCCESS:.0%}", "any step", "improvement",
         "tokens", "time s", "cost $"],
        [[html.escape(g.task), html.escape(g.label), "-" if g.baseline is None else f"{g.baseline:.4g}", str(g.runs),
          str(g.failed), pct(g.success[SUCCESS]), pct(g.success_any), signed_pct(g.improvement), num(g.tokens),
          num(g.time_s, ",.1f"), num(g.cost_usd, ".4f")] for g in data.groups], "summary")
    comparisons = "".join(
        f"<p class='cmp'>{html.escape(c.a)} − {html.escape(c.b)}: mean success difference {signed_pct(c.success_diff)}"
        f" over {len(c.tasks)} task(s); better on {c.wins}, worse on {c.losses}, tied on {c.ties}; sign test "
        f"p = {c.p_sign:.3g}</p>" for c in data.comparisons)
    figures = "".join(f'<figure><img src="{html.escape(p.name)}" alt="{html.escape(p.stem)}"></figure>'
                      for p in images)
    page = (_PAGE.replace("%TITLE%", html.escape(f"mlab bench {data.bench_dir.name}"))
            .replace("%SUMMARY%", summary + comparisons).replace("%FIGURES%", figures)
            .replace("%DATA%", _js({"runs": index})).replace("%SCRIPT%", _SCRIPT))
    path = out_dir / "index.html"
    path.write_text(page, encoding="utf-8")
    return path


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>%TITLE%</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.2em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.6em 0}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3} tr.sel{background:#e8f0fe} .runs tbody tr{cursor:pointer}
figure{display:inline-block;margin:.4em} figure img{max-width:640px;border:1px solid #ddd}
pre{white-space:pre-wrap;word-break:break-word;background:#f8f8f8;padding:.5em;border:1px solid #e3e3e3;
max-height:32em;overflow:auto;font-size:12px}
.err{color:#b00020} .ok{color:#1b5e20} .muted{color:#777}
#steps button{margin:1px;min-width:2.4em} #steps button.cur{background:#1a73e8;color:#fff}
#steps button.bad{border-color:#b00020}
.add{color:#1b5e20} .del{color:#b00020} .hunk{color:#6a1b9a}
</style></head><body>
<h1>%TITLE%</h1>
<h2>Summary</h2>%SUMMARY%
<h2>Plots</h2>%FIGURES%
<h2>Runs</h2><p class="muted">Click a run to see its trace.</p><div id="runs"></div>
<div id="viewer"></div>
<script>window.MLAB_REPORT = %DATA%;</script>
<script>%SCRIPT%</script>
</body></html>
"""

_SCRIPT = r"""
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
      '; improvement ' + pct(run.improvement) + '; ' + (data.usage.prompt_tokens + data.usage.completion_tokens) + ' tokens, $' +
      fmt(data.usage.cost_usd, 3) + ', ' + fmt(data.time_s, 4) + ' s</p>' + chart(run, data, cur);
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
"""
