#!/usr/bin/env bash
# `make gpu-check`: set up an environment of its own, then run check.py (see there) with it.
#
# Not `make setup`'s .venv: that pins the CPU build of torch. GPU_VENV (build/gpu-venv) is made with
# --system-site-packages, so the machine's own CUDA torch, transformers, numpy... are used, and mlab and its
# plugins go in with `pip install --no-deps -e`. The few requirements such a machine lacks (pydantic, tenacity,
# setuptools for the editable installs) come from GPU_WHEELS, a folder of wheels (pip --no-index --find-links),
# when one is given, else from PyPI. Without bwrap on PATH, a bubblewrap .deb in GPU_WHEELS/debs/ is unpacked
# into build/gpu-check/bwrap and put on PATH (never into /), so the bwrap sandbox is checked too.
#
# Environment: PYTHON (python3), GPU_VENV, GPU_WHEELS; arguments go to check.py (--device cpu: a dry run on a
# machine without a GPU). Exit codes are check.py's: 0 passed, 1 failed, 2 bad options, 3 no GPU (one line).
set -uo pipefail
script=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$script")/../.."
python=${PYTHON:-python3}
venv=${GPU_VENV:-build/gpu-venv}
wheels=${GPU_WHEELS:-}
work=build/gpu-check
bwrap_dir=$work/bwrap
log=$work/setup.log
stamp=$venv/.gpu-check-installed
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

# No GPU: one line and nothing set up (check.py says the same when torch has no CUDA).
if [[ " $* " != *" --device cpu "* && " $* " != *" --device=cpu "* ]] && ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu-check: no GPU here (no nvidia-smi on PATH); nothing was checked"
    exit 3
fi
if [[ -n $wheels && ! -d $wheels ]]; then
    echo "gpu-check: GPU_WHEELS=$wheels is not a folder"
    exit 2
fi

setup() {
    set -e
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { echo "$python is older than 3.10"; return 1; }
    rm -rf "$venv"
    if ! "$python" -m venv --system-site-packages "$venv"; then
        rm -rf "$venv"  # no ensurepip (Debian without python3-venv): python3's own pip installs into it
        "$python" -m venv --system-site-packages --without-pip "$venv"
    fi
    local py=$venv/bin/python
    local pip=("$py" -m pip)
    "${pip[@]}" --version >/dev/null 2>&1 || pip=("$python" -m pip --python "$py")
    # python3 may itself be a venv, whose packages --system-site-packages does not reach: a .pth file adds them
    # (check.py then shows them to the sandboxes too).
    if ! "$py" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)'; then
        local site
        site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        "$python" -c 'import site; print("\n".join(site.getsitepackages()))' >"$site/gpu-check-python3.pth"
    fi
    local from=()
    [[ -n $wheels ]] && from=(--no-index --find-links "$wheels")
    # Only what the machine lacks is installed: pip counts the system's packages as installed already.
    "${pip[@]}" install ${from[@]+"${from[@]}"} 'setuptools>=68' 'pydantic>=2.5' 'tenacity>=8.2'
    local editable=(-e .)
    for dir in plugins/*/*/; do editable+=(-e "$dir"); done
    "${pip[@]}" install --no-index --no-deps --no-build-isolation "${editable[@]}"
    "$py" -c 'import torch, transformers, mlab.core, mlab_tasks_mlagentbench; print("torch", torch.__version__)'
    if ! command -v bwrap >/dev/null 2>&1; then
        local deb
        deb=$(ls "${wheels:-/nonexistent}"/debs/bubblewrap_*.deb 2>/dev/null | head -n 1 || true)
        rm -rf "$bwrap_dir"
        if [[ -n $deb ]]; then
            mkdir -p "$bwrap_dir"
            if command -v dpkg >/dev/null 2>&1; then
                dpkg -x "$deb" "$bwrap_dir"
            else  # a .deb is an ar archive holding data.tar.*
                "$py" - "$deb" "$bwrap_dir" <<'EOF'
import io, sys, tarfile
blob, at = open(sys.argv[1], "rb").read(), 8
while at < len(blob):
    name, size = blob[at:at + 16].decode().strip().rstrip("/"), int(blob[at + 48:at + 58])
    if name.startswith("data.tar"):
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tarfile.open(fileobj=io.BytesIO(blob[at + 60:at + 60 + size])).extractall(sys.argv[2], **safe)
    at += 60 + size + size % 2
EOF
            fi
            "$bwrap_dir/usr/bin/bwrap" --version || echo "the carried bwrap does not run here"
        fi
    fi
    touch "$stamp"
}

mkdir -p "$work"
# Set up once; again when mlab's or a plugin's pyproject.toml or this script is newer than the last set-up.
if [[ ! -e $stamp || -n $(find pyproject.toml plugins/*/*/pyproject.toml "$script" -newer "$stamp" 2>/dev/null) ]]; then
    echo "gpu-check: setting up $venv (log: $log)"
    started=$SECONDS
    (setup) >"$log" 2>&1  # not under `if`, where bash would ignore the set -e inside
    if [[ $? != 0 ]]; then
        tail -n 30 "$log"
        echo "gpu-check: set-up failed; the whole log: $log"
        exit 1
    fi
    echo "gpu-check: set up in $((SECONDS - started)) s ($(grep '^torch ' "$log" | tail -n 1))"
fi
PATH="$PWD/$bwrap_dir/usr/bin:$PATH" exec "$venv/bin/python" benchmarks/gpu_check/check.py "$@"
