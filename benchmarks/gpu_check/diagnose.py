"""Why CUDA does not start inside a sandbox: the driver's cuInit, run as agent code in the local sandbox with one
more part of the host shown at a time (GPU device nodes, /sys, /run, /proc writable is not a variant: the plan
keeps it read-only), printing CUresult for each. 0 is CUDA_SUCCESS; 304 is CUDA_ERROR_OPERATING_SYSTEM.

    python benchmarks/gpu_check/diagnose.py        (with the gpu-check venv's python, on the GPU machine)
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.local import LocalSandbox
from mlab.core.sandbox.spec import ExecSpec

PROBE = ("import ctypes, os\n"
         "lib = ctypes.CDLL('libcuda.so.1')\n"
         "count = ctypes.c_int(-1)\n"
         "first = lib.cuInit(0)\n"
         "print('cuInit', first, 'count', lib.cuDeviceGetCount(ctypes.byref(count)), count.value)\n"
         "print('dev', sorted(n for n in os.listdir('/dev') if 'nv' in n))\n")
def every_node() -> str:
    """Each character device of /dev (links and the basic ones left out), and the nvidia-caps folder."""
    found = [f"/dev/{name}" for name in sorted(os.listdir("/dev"))
             if stat.S_ISCHR(os.lstat(f"/dev/{name}").st_mode)
             and name not in ("null", "zero", "full", "random", "urandom", "tty")]
    return ":".join(found + (["/dev/nvidia-caps"] if os.path.isdir("/dev/nvidia-caps") else []))


VARIANTS = {
    "as the plan is": {},
    "+ /sys read-only": {"MLAB_SANDBOX_RO": "/sys"},
    "+ /run read-only": {"MLAB_SANDBOX_RO": "/run"},
    "+ every /dev node": {"MLAB_GPU_DEVICES": "every"},
    "+ /sys and every /dev node": {"MLAB_SANDBOX_RO": "/sys", "MLAB_GPU_DEVICES": "every"},
    "+ /sys, /run, /var and every /dev node": {"MLAB_SANDBOX_RO": "/sys:/run:/var", "MLAB_GPU_DEVICES": "every"},
}


def bwrap_variants() -> None:
    """The same probe under bwrap, from the whole host shown (namespaces alone) toward mlab's own plan, and
    mlab's plan with one part of the host added: which difference CUDA trips on."""
    import shutil

    from mlab_sandbox_bwrap.sandbox import options_for

    exe = shutil.which("bwrap")
    if exe is None:
        print("bwrap: not here")
        return
    spec = ExecSpec(cwd=Path(tempfile.mkdtemp()), env={"PATH": "/usr/bin:/bin"})
    plan = options_for(spec, [sys.executable])
    at = next(i for i in range(len(plan) - 1) if plan[i:i + 2] == ["--remount-ro", "/"])

    def plan_with(*extra: str) -> list[str]:  # extra mounts go before the root is made read-only
        return [*plan[:at], *extra, *plan[at:]]

    whole = ["--dev-bind", "/", "/"]
    variants = {
        "whole host": whole,
        "whole host, own /proc": [*whole, "--proc", "/proc"],
        "whole host, own /proc read-only": [*whole, "--proc", "/proc", "--remount-ro", "/proc"],
        "whole host, own /dev": ["--bind", "/", "/", "--dev", "/dev",
                                 *[a for d in NODES for a in ("--dev-bind", d, d)]],
        "whole host, own /tmp": [*whole, "--tmpfs", "/tmp"],
        "whole host, namespaces of the plan": [*whole, "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                                               "--unshare-net", "--cap-drop", "ALL"],
        "the plan": plan,
        "the plan + /etc": plan_with("--ro-bind", "/etc", "/etc"),
        "the plan + /sys": plan_with("--ro-bind", "/sys", "/sys"),
        "the plan + host /dev": plan_with("--dev-bind", "/dev", "/dev"),
        "the plan + writable /proc": plan_with("--proc", "/proc"),
        "the plan + /opt /var /run /root /home": plan_with(*[a for d in ("/opt", "/var", "/run", "/root", "/home")
                                                           if os.path.isdir(d) for a in ("--ro-bind", d, d)]),
        "the plan + /etc /sys /dev /proc": plan_with("--ro-bind", "/etc", "/etc", "--ro-bind", "/sys", "/sys",
                                                     "--dev-bind", "/dev", "/dev", "--proc", "/proc"),
    }
    for label, options in variants.items():
        done = subprocess.run([exe, *options, "--", sys.executable, "-c", PROBE], capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin"}, timeout=60)
        print(f"{'bwrap, ' + label:>48}: {' | '.join((done.stdout + done.stderr).strip().splitlines()[-2:])}")


NODES = [f"/dev/{name}" for name in ("nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps")]


def main() -> int:
    try:
        bwrap_variants()
    except Exception as exc:  # the rest of the diagnosis still runs
        print(f"bwrap variants failed: {exc!r}")
    if "--bwrap-only" in sys.argv:
        return 0
    print("host:", subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True).stdout.strip())
    print("host /dev/nvidia*:", sorted(p for p in os.listdir("/dev") if p.startswith("nvidia")))
    # outside mlab: without capabilities, and in new PID and mount namespaces, one at a time
    for label, prefix in (("no capabilities", ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]),
                          ("no new privileges", ["setpriv", "--no-new-privs"]),
                          ("pid+mount namespaces", ["unshare", "--pid", "--fork", "--mount", "--mount-proc"]),
                          ("ipc+uts+net namespaces", ["unshare", "--ipc", "--uts", "--net"])):
        done = subprocess.run([*prefix, sys.executable, "-c", PROBE], capture_output=True, text=True)
        print(f"{'host, ' + label:>40}: {' | '.join((done.stdout + done.stderr).strip().splitlines()[-2:])}")
    base = os.environ.get("MLAB_SANDBOX_RO", "")
    with tempfile.TemporaryDirectory() as folder:
        for label, extra in VARIANTS.items():
            os.environ.pop("MLAB_GPU_DEVICES", None)
            os.environ["MLAB_SANDBOX_RO"] = ":".join(filter(None, [base, extra.get("MLAB_SANDBOX_RO", "")]))
            if "MLAB_GPU_DEVICES" in extra:
                os.environ["MLAB_GPU_DEVICES"] = every_node()
            for zygotes in (True, False):
                box = LocalSandbox(zygotes=zygotes)
                spec = ExecSpec(cwd=Path(folder), env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                                limits=Limits(timeout_s=60, memory_bytes=None))
                try:
                    result = box.run([sys.executable, "-c", PROBE], spec)
                    shown = result.output.strip().replace("\n", " | ")[-300:]
                finally:
                    box.close()
                print(f"{label:>40} {'zygote' if zygotes else 'afresh':>6}: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
