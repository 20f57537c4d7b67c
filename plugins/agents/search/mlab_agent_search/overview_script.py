"""The data overview the search agent's harness side takes of the workspace, in one Python REPL step: the files,
the starter script, the description files and, for each CSV file, its row count, columns, types and examples.
The model never reads files itself (it writes whole scripts), so this is its view of the task's data.

This text runs as a REPL command inside the sandbox, under the task's Python: standard library only. Everything
it defines is deleted at the end, so nothing of it stays in the REPL's namespace.
"""


def _mlab_overview(starter, starter_chars=8000, text_chars=6000, total_chars=24000, max_csv=12, sample_rows=2000):
    import csv
    import os

    csv.field_size_limit(1 << 24)
    skip_dirs = {"solutions", "__pycache__", ".git", "output", "checkpoints"}
    files, dirs_cut = [], {}
    for root, dirnames, names in os.walk("."):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in skip_dirs)
        rel_root = os.path.relpath(root, ".")
        shown = sorted(n for n in names if not n.startswith("."))
        depth = 0 if rel_root == "." else rel_root.count(os.sep) + 1
        if len(shown) > 40 or depth > 2:  # a folder of many records: counted, not listed
            dirs_cut[rel_root] = len(shown)
            dirnames[:] = dirnames[:5]
            continue
        for name in shown:
            path = name if rel_root == "." else os.path.join(rel_root, name)
            try:
                files.append((path, os.path.getsize(path)))
            except OSError:
                pass

    def size(n):
        for unit in ("B", "KB", "MB", "GB"):
            if n < 1024 or unit == "GB":
                return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
            n /= 1024

    out = ["## Files"]
    out += [f"- {path} ({size(n)})" for path, n in files[:150]]
    if len(files) > 150:
        out.append(f"- ... and {len(files) - 150} more files")
    out += [f"- {folder}/: {count} files (not listed)" for folder, count in sorted(dirs_cut.items())]

    def text_of(path, limit):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(limit + 1)
        return text if len(text) <= limit else text[:limit] + "\n[... cut]"

    out.append(f"\n## The starter script, {starter}")
    if os.path.isfile(starter):
        out.append("```python\n" + text_of(starter, starter_chars) + "\n```")
    else:
        out.append("(there is none)")

    for path, _n in files:
        if path.endswith((".txt", ".md")) and os.sep not in path and path != starter:
            out.append(f"\n## {path}\n" + text_of(path, text_chars))

    def kind(values):
        filled = [v for v in values if v.strip() != ""]
        if not filled:
            return "empty", filled
        for name, cast in (("int", int), ("float", float)):
            try:
                for v in filled:
                    cast(v)
                return name, filled
            except ValueError:
                pass
        if all(v.strip().lower() in ("true", "false") for v in filled):
            return "bool", filled
        return "text", filled

    for path, _size in [f for f in files if f[0].endswith(".csv")][:max_csv]:
        try:
            with open(path, newline="", encoding="utf-8", errors="replace") as f:
                reader = csv.reader(f)
                header = next(reader, [])
                rows = []
                count = 0
                for row in reader:
                    if count < sample_rows:
                        rows.append(row)
                    count += 1
        except (OSError, csv.Error) as exc:
            out.append(f"\n## {path}: not readable as CSV ({exc})")
            continue
        out.append(f"\n## {path}: {count} rows, {len(header)} columns"
                   + (f" (types from the first {sample_rows} rows)" if count > sample_rows else ""))
        for i, column in enumerate(header[:80]):
            values = [r[i] if i < len(r) else "" for r in rows]
            name, filled = kind(values)
            missing = len(values) - len(filled)
            note = f", {missing} missing" if missing else ""
            if name in ("int", "float"):
                numbers = [float(v) for v in filled]
                note += f", {min(numbers):g} to {max(numbers):g}"
            elif name in ("text", "bool"):
                distinct = sorted(set(filled))
                examples = ", ".join(repr(v[:30]) for v in distinct[:3])
                note += f", {len(distinct)} distinct, e.g. {examples}"
            out.append(f"- {column}: {name}{note}")
        if len(header) > 80:
            out.append(f"- ... and {len(header) - 80} more columns")
    text = "\n".join(out)
    print(text if len(text) <= total_chars else text[:total_chars] + "\n[... overview cut]")
