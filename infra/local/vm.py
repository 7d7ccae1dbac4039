"""A throwaway qemu guest on this machine's own files, to run a command under another kernel setup.

Why: the sandbox has a cgroup v1 and a cgroup v2 path, and this machine (like CI's) boots cgroup v1. The guest
boots Debian's stock kernel with only cgroup v2 mounted at ``/sys/fs/cgroup``, on the host's root filesystem
shared read-only over virtio-9p under a tmpfs overlay: the very same Python, virtualenv, repo and sandbox
rootfs, so a test run in the guest exercises the real code on a real cgroup v2 kernel. Nothing the guest
writes reaches the host except through ``out_dir`` (its second, writable share). The guest has no network.

Everything it needs comes from Debian's packages (qemu-system-x86, busybox-static, kmod, cpio and the
``linux-image-amd64`` kernel, downloaded once into the cache). The guest is emulated (TCG) by default: on
these machines (themselves VMs) nested KVM hangs before the kernel prints a line. ``RS_VM_ACCEL=kvm`` uses
``/dev/kvm`` where it works.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from schemas.errors import RewardstreamError

#: Characters of a failed command's stderr, its end, that its error quotes.
_STDERR_SHOWN_CHARS = 2000
#: Bytes at the start of a binary read to tell a static one from one that needs the dynamic loader.
_ELF_HEAD_BYTES = 64 * 1024

#: Debian's metapackage that depends on the current stock kernel image.
KERNEL_METAPACKAGE = "linux-image-amd64"
#: Host tools the guest needs, with the Debian package that provides each.
HOST_TOOLS = {
    "qemu-system-x86_64": "qemu-system-x86",
    "busybox": "busybox-static",
    "depmod": "kmod",
    "modprobe": "kmod",
    "cpio": "cpio",
}
#: Kernel modules the initramfs loads (with their dependencies) to mount the host's root: virtio-pci, 9p, overlay.
_BOOT_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay")
_APT_TIMEOUT_S = 600.0

_INIT = """#!/bin/busybox sh
# Stage 1 (initramfs): load the 9p/overlay modules, mount the host's root read-only under a tmpfs overlay.
/bin/busybox mkdir -p /proc /sys /dev /lower /upper /newroot
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t devtmpfs dev /dev
while read -r module; do /bin/busybox insmod "$module" || echo "vm: insmod $module failed"; done < /modules.order
opts=trans=virtio,version=9p2000.L,msize=512000
/bin/busybox mount -t 9p -o "ro,cache=loose,$opts" hostroot /lower || echo "vm: cannot mount the host root"
/bin/busybox mount -t tmpfs -o mode=0755 upper /upper
/bin/busybox mkdir -p /upper/data /upper/work
/bin/busybox mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work overlay /newroot \\
    || echo "vm: cannot mount the overlay root"
/bin/busybox mkdir -p /newroot/run/vm-out
/bin/busybox mount -t 9p -o "$opts" vmout /newroot/run/vm-out || echo "vm: cannot mount the output share"
/bin/busybox umount /dev
/bin/busybox umount /proc
exec /bin/busybox switch_root /newroot /bin/sh /run/vm-out/stage2.sh
"""

_STAGE2 = """# Stage 2 (on the host's files): a fresh /proc, /sys, /dev, cgroup v2 only, then the command; power off.
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm /dev/mqueue
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
mount -t mqueue mqueue /dev/mqueue
# no tmpfs over /tmp: the repo or the cache may live there (a CI clone); the overlay root is writable
ip link set lo up 2>/dev/null || true
hostname rs-vm
export HOME={home} PATH={path} LANG=C.UTF-8
cd {cwd}
(export {env}; exec {command}) >/run/vm-out/stdout 2>/run/vm-out/stderr </dev/null
echo $? > /run/vm-out/exit_code.tmp && mv /run/vm-out/exit_code.tmp /run/vm-out/exit_code
sync
echo o > /proc/sysrq-trigger
while :; do sleep 1; done
"""


class VmError(RewardstreamError):
    """The guest could not be prepared or booted (not: the command in it failed)."""


@dataclass(frozen=True, slots=True)
class GuestKernel:
    """A Debian kernel unpacked in the cache, with the initramfs built for it."""

    version: str
    vmlinuz: Path
    initramfs: Path


@dataclass(frozen=True, slots=True)
class VmResult:
    """What the command in the guest did, and how the guest ran."""

    exit_code: int | None  # None: the guest stopped before the command finished (crash, timeout)
    stdout: str
    stderr: str
    console: str
    kvm: bool
    wall_s: float


def missing_host_tools() -> list[str]:
    """Debian packages still to install for the guest (empty when everything is there)."""
    return sorted({pkg for tool, pkg in HOST_TOOLS.items() if shutil.which(tool) is None})


def kvm_usable() -> bool:
    """True when this process may use hardware virtualization (else the guest runs emulated, much slower)."""
    return os.access("/dev/kvm", os.R_OK | os.W_OK)


def _run(cmd: list[str], *, cwd: Path | None = None, timeout: float = _APT_TIMEOUT_S) -> str:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VmError(f"{shlex.join(cmd)}: {exc}") from exc
    if proc.returncode != 0:
        raise VmError(f"{shlex.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-_STDERR_SHOWN_CHARS:]}")
    return proc.stdout


def _kernel_package() -> str:
    """The versioned kernel image package the metapackage points at (e.g. ``linux-image-6.1.0-57-amd64``)."""
    for line in _run(["apt-cache", "depends", KERNEL_METAPACKAGE]).splitlines():
        name = line.strip().removeprefix("Depends:").strip()
        if line.strip().startswith("Depends:") and name.startswith("linux-image-"):
            return name
    raise VmError(f"apt-cache names no kernel image for {KERNEL_METAPACKAGE}")


def _download_kernel(staging: Path) -> str:
    """Download the stock kernel's package into ``staging``; on a machine whose package lists are missing or
    stale (a fresh CI machine), refresh them once and retry."""
    try:
        package = _kernel_package()
        _run(["apt-get", "download", package], cwd=staging)
    except VmError:
        _run(["apt-get", "update", "-qq"])
        package = _kernel_package()
        _run(["apt-get", "download", package], cwd=staging)
    return package


def _cached_kernel_dirs(vm_dir: Path) -> list[Path]:
    return sorted(p for p in vm_dir.glob("linux-image-*") if (p / ".complete").exists())


def _unpack_kernel(vm_dir: Path) -> Path:
    """Download and unpack the stock kernel once; the newest unpacked one is reused afterwards (no network
    needed, and the guest does not change under a test run when Debian publishes a new kernel)."""
    cached = _cached_kernel_dirs(vm_dir)
    if cached:
        return cached[-1]
    staging = vm_dir / ".download.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    package = _download_kernel(staging)
    debs = list(staging.glob("*.deb"))
    if len(debs) != 1:
        raise VmError(f"apt-get download {package} left {len(debs)} packages in {staging}")
    _run(["dpkg-deb", "-x", str(debs[0]), str(staging / "root")])
    debs[0].unlink()
    target = vm_dir / package
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    (target / ".complete").touch()
    return target


def _boot_module_paths(root: Path, version: str) -> list[Path]:
    """The .ko files to insmod, dependencies first, as modprobe resolves them for this kernel."""
    _run(["depmod", "-b", str(root), version])
    order: list[Path] = []
    for module in _BOOT_MODULES:
        out = _run(["modprobe", "-d", str(root), "-S", version, "--show-depends", module])
        for line in out.splitlines():
            words = line.split()
            if words[:1] == ["insmod"]:
                path = Path(words[1])
                if path not in order:
                    order.append(path)
    return order


def _build_initramfs(root: Path, version: str, target: Path) -> None:
    staging = target.parent / f".{target.name}.d"
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "bin").mkdir(parents=True)
    (staging / "lib" / "modules").mkdir(parents=True)
    busybox = shutil.which("busybox")
    if busybox is None or b"ld-linux" in Path(busybox).read_bytes()[:_ELF_HEAD_BYTES]:
        raise VmError(
            f"need a statically linked busybox for the initramfs (found {busybox}): apt-get install busybox-static"
        )
    shutil.copy2(busybox, staging / "bin" / "busybox")
    names: list[str] = []
    for module in _boot_module_paths(root, version):
        shutil.copy2(module, staging / "lib" / "modules" / module.name)
        names.append(f"/lib/modules/{module.name}")
    (staging / "modules.order").write_text("\n".join(names) + "\n")
    init = staging / "init"
    init.write_text(_INIT)
    init.chmod(0o755)
    files = sorted(str(p.relative_to(staging)) for p in staging.rglob("*"))
    partial = target.with_suffix(".partial")
    with partial.open("wb") as out:
        proc = subprocess.run(
            ["cpio", "--quiet", "-o", "-H", "newc", "-R", "0:0"],
            cwd=staging,
            input="\n".join(files).encode(),
            stdout=out,
            stderr=subprocess.PIPE,
            check=False,
        )
    if proc.returncode != 0:
        raise VmError(f"cpio failed: {proc.stderr.decode(errors='replace')}")
    partial.rename(target)
    shutil.rmtree(staging, ignore_errors=True)


def ensure_guest_kernel(cache_dir: Path) -> GuestKernel:
    """The stock kernel and an initramfs for it, built once under ``cache_dir/vm``."""
    missing = missing_host_tools()
    if missing:
        raise VmError(f"missing Debian packages for the test VM: apt-get install {' '.join(missing)}")
    vm_dir = cache_dir / "vm"
    vm_dir.mkdir(parents=True, exist_ok=True)
    unpacked = _unpack_kernel(vm_dir)
    root = unpacked / "root"
    versions = sorted(p.name for p in (root / "lib" / "modules").iterdir())
    if len(versions) != 1:
        raise VmError(f"{root}: expected one kernel version, found {versions}")
    version = versions[0]
    initramfs = unpacked / f"initramfs-{version}.cpio"
    if not initramfs.exists() or initramfs.stat().st_mtime < Path(__file__).stat().st_mtime:
        _build_initramfs(root, version, initramfs)
    return GuestKernel(version, root / "boot" / f"vmlinuz-{version}", initramfs)


def _read(path: Path) -> str:
    with contextlib.suppress(FileNotFoundError):
        return path.read_text(errors="replace")
    return ""


def run_in_vm(
    kernel: GuestKernel,
    command: list[str],
    *,
    out_dir: Path,
    cwd: Path,
    env: dict[str, str] | None = None,
    memory_mb: int = 4096,
    cpus: int = 2,
    timeout_s: float = 1800.0,
) -> VmResult:
    """Boot the guest, run ``command`` in ``cwd`` with ``env`` added, power off; ``out_dir`` is shared
    writable at ``/run/vm-out`` (the command's stdout/stderr land there, and it may write results there)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("stdout", "stderr", "exit_code", "console"):
        (out_dir / name).unlink(missing_ok=True)
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items()) or "RS_VM=1"
    (out_dir / "stage2.sh").write_text(
        _STAGE2.format(
            home=shlex.quote(str(Path.home())),
            path=shlex.quote(os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")),
            cwd=shlex.quote(str(cwd)),
            env=exports,
            command=shlex.join(command),
        )
    )
    kvm = kvm_usable() and os.environ.get("RS_VM_ACCEL") == "kvm"
    accel = ["-enable-kvm", "-cpu", "host,-arch-capabilities"] if kvm else ["-accel", "tcg,thread=multi", "-cpu", "max"]
    share = "local,security_model=none,multidevs=remap"
    cmd = [
        "qemu-system-x86_64",
        *accel,
        "-m", str(memory_mb), "-smp", str(cpus),
        "-nographic", "-no-reboot", "-nic", "none",
        "-kernel", str(kernel.vmlinuz), "-initrd", str(kernel.initramfs),
        "-append", "console=ttyS0 panic=-1 systemd.unified_cgroup_hierarchy=1",
        "-fsdev", f"{share},id=hostroot,path=/,readonly=on",
        "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
        "-fsdev", f"{share},id=vmout,path={out_dir}",
        "-device", "virtio-9p-pci,fsdev=vmout,mount_tag=vmout",
    ]  # fmt: skip
    started = time.monotonic()
    with (out_dir / "console").open("wb") as console:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    code_text = _read(out_dir / "exit_code").strip()
    return VmResult(
        exit_code=int(code_text) if code_text.lstrip("-").isdigit() else None,
        stdout=_read(out_dir / "stdout"),
        stderr=_read(out_dir / "stderr"),
        console=_read(out_dir / "console"),
        kvm=kvm,
        wall_s=time.monotonic() - started,
    )
