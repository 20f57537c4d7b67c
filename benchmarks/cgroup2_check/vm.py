"""`make cgroup2-check`: the cgroup tests on a machine whose only cgroup hierarchy is v2, for machines that are v1.

A run's compute slice (CPU quota and set, memory, processes), the hardware line and the command cgroups have a v2
path of their own (core/sandbox/cgroups.py, core/hardware.py). A v1 machine cannot show it: its controllers are
held by the v1 hierarchies. So this boots a virtual machine on this one, with Debian's kernel (a package, installed
by the make target), QEMU (emulated; --accel kvm where KVM works), this machine's root file system seen read-only
through 9p with a tmpfs over it (writes stay in the VM), and cgroup2 alone at /sys/fs/cgroup with every
controller; then runs pytest on the given test files there, with the repository's .venv, and exits with
pytest's code.

    python benchmarks/cgroup2_check/vm.py [--accel tcg|kvm] [--memory-mb 8192] [--timeout-s 3600] [pytest args...]

The VM has no network device. Its console is printed from the kernel's last line on; what the VM wrote is gone
when it stops. Exit codes: pytest's inside; 3 when the VM cannot be made here (one line saying what is missing).
"""
from __future__ import annotations

import argparse
import gzip
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import NoReturn

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / "build" / "cgroup2-vm"
TESTS = ["tests/test_compute_slices.py", "tests/test_command_start.py", "tests/test_sandbox_zygote.py",
         "tests/test_timer_counts_ended_processes.py", "tests/test_bench_per_run_work.py",
         "tests/test_hardware_record.py", "tests/test_hostile.py"]
# the 9p root, the overlay that makes it writable, and what they need, in the order modules.dep gives
# Cases whose time limits (1.5-3 s) emulated Python in bwrap or docker does not always meet: not cgroups
SLOW_HERE = ["-k", "not test_infinite_loop and not test_sleeping_after_closing_stdout and not test_filling_the_disk"]
MODULES = ["9p", "9pnet_virtio", "virtio_pci", "overlay"]
EXIT_MARK = "CGROUP2-VM-EXIT="

INIT = """#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in {modules}; do insmod /mods/$m.ko || echo "insmod $m failed"; done
mkdir -p /lower /rw /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=1048576,cache=loose hostroot /lower \
    || {{ echo "no 9p root"; poweroff -f; }}
mount -t tmpfs -o size={tmpfs_mb}m tmpfs /rw && mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot \
    || {{ echo "no overlay"; poweroff -f; }}
mount -t proc proc /newroot/proc; mount -t sysfs sys /newroot/sys; mount -t devtmpfs dev /newroot/dev
mount -t tmpfs tmpfs /newroot/run
mount -t cgroup2 cgroup2 /newroot/sys/fs/cgroup
echo "VM: Linux $(uname -r), cgroup2 alone, controllers: $(cat /newroot/sys/fs/cgroup/cgroup.controllers)"
exec switch_root /newroot /bin/sh -c '/bin/sh {command}; echo {mark}$?; /bin/busybox poweroff -f'
"""


def missing(what: str) -> NoReturn:
    print(f"cgroup2-check: {what}; nothing was checked")
    sys.exit(3)


def kernel() -> tuple[Path, Path]:
    """A Debian kernel with 9p as modules (linux-image-amd64; the cloud flavour has no 9p)."""
    for image in sorted(Path("/boot").glob("vmlinuz-*"), reverse=True):
        modules = Path("/lib/modules") / image.name.removeprefix("vmlinuz-")
        if (modules / "kernel/fs/9p/9p.ko").is_file() and os.access(image, os.R_OK):
            return image, modules
    missing("no kernel with 9p modules in /boot (apt-get install linux-image-amd64)")


def module_order(modules: Path) -> list[Path]:
    """MODULES and what they need, each after what it needs."""
    deps: dict[str, list[str]] = {}
    for line in (modules / "modules.dep").read_text().splitlines():
        path, _, needs = line.partition(":")
        deps[path] = needs.split()
    by_name = {Path(p).name.removesuffix(".ko"): p for p in deps}
    order: list[str] = []

    def add(path: str) -> None:
        if path in order:
            return
        for need in reversed(deps[path]):  # modules.dep lists the nearest need first
            add(need)
        order.append(path)

    for name in MODULES:
        if name not in by_name:
            missing(f"{modules.name} has no module {name} (uncompressed)")
        add(by_name[name])
    return [modules / p for p in order]


def initramfs(modules: list[Path], command: Path, tmpfs_mb: int) -> Path:
    busybox = shutil.which("busybox")
    if busybox is None or b"ld-linux" in Path(busybox).read_bytes()[:4096]:  # a dynamic one names its loader there
        missing("no static busybox (apt-get install busybox-static)")
    tree = WORK / "initramfs"
    shutil.rmtree(tree, ignore_errors=True)
    for folder in ("bin", "mods", "proc", "sys", "dev"):
        (tree / folder).mkdir(parents=True)
    shutil.copy(busybox, tree / "bin" / "busybox")
    for module in modules:
        shutil.copy(module, tree / "mods" / module.name)
    init = tree / "init"
    init.write_text(INIT.format(modules=" ".join(m.name.removesuffix(".ko") for m in modules), tmpfs_mb=tmpfs_mb,
                                command=shlex.quote(str(command)), mark=EXIT_MARK))
    init.chmod(0o755)
    names = subprocess.run(["find", "."], cwd=tree, capture_output=True, check=True).stdout
    archive = subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=tree, input=names, capture_output=True,
                             check=True).stdout
    out = WORK / "initramfs.gz"
    out.write_bytes(gzip.compress(archive, compresslevel=1))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memory-mb", type=int, default=8192)
    parser.add_argument("--timeout-s", type=int, default=3600)
    parser.add_argument("--accel", choices=["tcg", "kvm"], default="tcg", help="QEMU's emulation, or KVM")
    args, pytest_args = parser.parse_known_args()
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        missing("needs Linux on x86_64")
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        missing("no qemu-system-x86_64 (apt-get install qemu-system-x86)")
    if shutil.which("cpio") is None:
        missing("no cpio")
    python = REPO / ".venv" / "bin" / "python"
    if not python.exists():
        missing("no .venv (make setup)")
    image, modules = kernel()
    WORK.mkdir(parents=True, exist_ok=True)
    command = WORK / "command.sh"  # read through the 9p root: the repository's own path is the same in the VM
    command.write_text(
        f"cd {shlex.quote(str(REPO))} || exit 1\n"
        "export HOME=/root/cgroup2-vm TMPDIR=/tmp PYTHONDONTWRITEBYTECODE=1 LITELLM_LOCAL_MODEL_COST_MAP=True\n"
        "mkdir -p \"$HOME\"\n"
        "echo \"cgroup of this shell: $(cat /proc/self/cgroup)\"\n"
        f"{shlex.quote(str(python))} -m pytest -q -p no:cacheprovider -rfEs -n 2 "
        f"{' '.join(shlex.quote(a) for a in pytest_args or [*SLOW_HERE, *TESTS])}\n")
    initrd = initramfs(module_order(modules), command, args.memory_mb // 2)
    # emulated unless asked: this project's VMs have a /dev/kvm whose guests hang at boot
    accel = ["-accel", "kvm", "-cpu", "host"] if args.accel == "kvm" else ["-accel", "tcg,thread=multi", "-cpu", "max"]
    vm = [qemu, "-machine", "q35", *accel, "-smp", str(min(os.cpu_count() or 1, 4)),
          "-m", str(args.memory_mb), "-kernel", str(image), "-initrd", str(initrd),
          "-append", "console=ttyS0 quiet panic=-1", "-nographic", "-no-reboot", "-nic", "none",
          "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"]
    code = None
    shown = False
    before: list[str] = []  # the firmware's and QEMU's lines: shown only when the VM never started
    with subprocess.Popen(vm, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL) as child:
        assert child.stdout is not None
        limit = threading.Timer(args.timeout_s, child.kill)
        limit.start()
        for raw in child.stdout:
            line = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1bc", "", raw.decode(errors="replace")).rstrip()
            if not shown and "VM: " in line:  # the firmware leaves no line break before it
                shown, line = True, line[line.index("VM: "):]
            if line.startswith(EXIT_MARK):
                code = int(line[len(EXIT_MARK):] or 1)
            elif shown:
                print(line, flush=True)
            else:
                before.append(line)
        limit.cancel()
        if not limit.is_alive() and child.wait() < 0 and code is None:
            print(f"cgroup2-check: the VM was stopped after {args.timeout_s} s")
    if not shown:
        print("\n".join(before[-20:]))
    if code is None:
        print("cgroup2-check: the VM stopped without the tests' exit code")
        sys.exit(1)
    sys.exit(code)


if __name__ == "__main__":
    main()
