"""What the cluster changes on the host, recorded before it starts and put back when it stops.

The kubelet changes kernel tunables (``protectKernelDefaults: false``), adds iptables chains it cannot be told
not to add, bind-mounts its root dir, creates ``kubepods`` cgroups and a few directories outside its root dir.
``capture`` records the host's state of each of those; ``restore`` undoes only what appeared since (never a
rule, mount or directory that was there before, so nobody else's state is touched); ``differences`` lists
what is still not as it was (empty once restored).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from schemas.errors import PlatformError

#: The tunables the kubelet sets when it is not told to protect them (its KernelTunables), plus forwarding,
#: which a CNI bridge turns on. Each is restored to its recorded value.
WATCHED_SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
    "net.ipv6.conf.all.forwarding",
)

#: Directories the kubelet, containerd or the CRI create outside the cluster's own dir. Removed when they did
#: not exist before; those shared with docker's containerd (``/run/containerd/...``) only when empty.
OWNED_DIRS = ("/var/lib/kubelet", "/var/lib/cni", "/var/log/containers", "/var/log/pods", "/etc/kubernetes",
              "/var/run/kubernetes")  # fmt: skip
SHARED_DIRS = ("/run/containerd/runc/k8s.io", "/run/containerd/runc", "/run/containerd/fifo", "/run/netns")

#: Top-level cgroups the kubelet creates in every hierarchy (cgroupfs driver, cgroup v1 or v2).
KUBELET_CGROUPS = ("kubepods", "kubepods.slice")
CGROUP_ROOT = Path("/sys/fs/cgroup")
IPTABLES = ("iptables", "ip6tables")


@dataclass
class HostState:
    """One reading of everything the cluster may change."""

    sysctls: dict[str, str] = field(default_factory=dict)
    iptables_rules: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """``iptables``/``ip6tables`` -> table -> its ``-S`` lines (chain declarations and rules)."""
    mounts: list[str] = field(default_factory=list)
    dirs: dict[str, bool] = field(default_factory=dict)
    cgroups: list[str] = field(default_factory=list)
    """Top-level cgroup dirs, ``hierarchy/name``."""
    links: list[str] = field(default_factory=list)
    nft_tables: list[str] = field(default_factory=list)
    """``family name`` of each nftables table (iptables-nft keeps its tables there: a table it created stays,
    empty, after its chains are deleted)."""

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: Path) -> HostState:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError) as exc:
            raise PlatformError(f"cannot read the host snapshot {path}: {exc}") from exc


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def read_sysctls(names: tuple[str, ...] = WATCHED_SYSCTLS) -> dict[str, str]:
    values = {}
    for name in names:
        try:
            values[name] = _sysctl_path(name).read_text().strip()
        except OSError:
            continue
    return values


def iptables_tables(command: str) -> list[str]:
    """The tables that exist for one family (reading a table that does not exist would create it)."""
    proc_names = {"iptables": "/proc/net/ip_tables_names", "ip6tables": "/proc/net/ip6_tables_names"}
    save = shutil.which(f"{command}-save")
    if save is None:
        return []
    result = subprocess.run([save], capture_output=True, text=True, check=False)
    tables = [line[1:].strip() for line in result.stdout.splitlines() if line.startswith("*")]
    if not tables and Path(proc_names[command]).exists():
        tables = Path(proc_names[command]).read_text().split()
    return tables


def read_iptables() -> dict[str, dict[str, list[str]]]:
    rules: dict[str, dict[str, list[str]]] = {}
    for command in IPTABLES:
        if shutil.which(command) is None:
            continue
        rules[command] = {}
        for table in iptables_tables(command):
            result = subprocess.run([command, "-w", "-t", table, "-S"], capture_output=True, text=True, check=False)
            if result.returncode == 0:
                rules[command][table] = result.stdout.splitlines()
    return rules


def read_mounts() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        points.append(line.split()[4].encode().decode("unicode_escape"))
    return points


def read_cgroups() -> list[str]:
    found: list[str] = []
    if not CGROUP_ROOT.is_dir():
        return found
    hierarchies = [p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink()]
    if (CGROUP_ROOT / "cgroup.controllers").exists():  # cgroup v2: the root is the one hierarchy
        hierarchies = [CGROUP_ROOT]
    for hierarchy in hierarchies:
        for name in KUBELET_CGROUPS:
            if (hierarchy / name).is_dir():
                found.append(str(hierarchy / name))
    return sorted(found)


def read_nft_tables() -> list[str]:
    if shutil.which("nft") is None:
        return []
    result = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=False)
    return sorted(line.removeprefix("table ").strip() for line in result.stdout.splitlines() if line.strip())


def capture() -> HostState:
    """The host as it is now, in every respect the cluster may change."""
    return HostState(
        sysctls=read_sysctls(),
        iptables_rules=read_iptables(),
        mounts=read_mounts(),
        dirs={d: os.path.lexists(d) for d in (*OWNED_DIRS, *SHARED_DIRS)},
        cgroups=read_cgroups(),
        links=sorted(os.listdir("/sys/class/net")),
        nft_tables=read_nft_tables(),
    )


def restore_sysctls(before: HostState) -> list[str]:
    """Put back every watched tunable that changed; return what was done."""
    done = []
    for name, value in read_sysctls().items():
        old = before.sysctls.get(name)
        if old is not None and old != value:
            _sysctl_path(name).write_text(old + "\n")
            done.append(f"sysctl {name} {value} -> {old}")
    return done


def _chain_of(rule: str) -> str:
    return rule.split()[1]


def restore_iptables(before: HostState) -> list[str]:
    """Delete the chains that appeared since ``before`` and every rule that jumps to them."""
    done = []
    for command, tables in read_iptables().items():
        for table, rules in tables.items():
            old = set(before.iptables_rules.get(command, {}).get(table, []))
            new_chains = [_chain_of(r) for r in rules if r.startswith("-N ") and r not in old]
            if not new_chains:
                continue
            for rule in rules:
                argv = shlex.split(rule)
                if argv[0] == "-A" and argv[1] not in new_chains and any(c in argv for c in new_chains):
                    _iptables(command, table, ["-D", *argv[1:]])
                    done.append(f"{command} -t {table} -D {' '.join(argv[1:])}")
            for chain in new_chains:
                _iptables(command, table, ["-F", chain])
            for chain in new_chains:
                _iptables(command, table, ["-X", chain])
                done.append(f"{command} -t {table} -X {chain}")
    return done + _drop_emptied_tables(before)


def _drop_emptied_tables(before: HostState) -> list[str]:
    """Delete the nftables tables iptables-nft created for the kubelet, once nothing but policies is left."""
    done = []
    families = {"iptables": "ip", "ip6tables": "ip6"}
    for command, tables in read_iptables().items():
        for table, rules in tables.items():
            entry = f"{families[command]} {table}"
            if entry in before.nft_tables or entry not in read_nft_tables():
                continue
            if all(rule.startswith("-P ") and rule.endswith(" ACCEPT") for rule in rules):
                result = subprocess.run(["nft", "delete", "table", *entry.split()], capture_output=True, check=False)
                if result.returncode == 0:
                    done.append(f"nft delete table {entry}")
    return done


def _iptables(command: str, table: str, args: list[str]) -> None:
    result = subprocess.run([command, "-w", "-t", table, *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PlatformError(f"{command} -t {table} {' '.join(args)} failed: {result.stderr.strip()}")


def restore_mounts(before: HostState, prefixes: tuple[str, ...]) -> list[str]:
    """Unmount, deepest first, what was mounted since ``before`` under one of ``prefixes``."""
    old = set(before.mounts)
    new = [m for m in read_mounts() if m not in old and any(m == p or m.startswith(p + "/") for p in prefixes)]
    done = []
    for point in sorted(set(new), key=lambda m: m.count("/"), reverse=True):
        result = subprocess.run(["umount", point], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True, text=True, check=False)
        done.append(f"umount {point}")
    return done


def restore_dirs(before: HostState) -> list[str]:
    done = []
    for path in OWNED_DIRS:
        if not before.dirs.get(path, True) and os.path.lexists(path):
            shutil.rmtree(path)
            done.append(f"rm -r {path}")
    for path in SHARED_DIRS:  # deepest first, as listed; only when nothing of anybody else's is inside
        if not before.dirs.get(path, True) and os.path.isdir(path) and not os.listdir(path):
            os.rmdir(path)
            done.append(f"rmdir {path}")
    return done


def _remove_cgroup_tree(top: Path) -> None:
    for sub in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        os.rmdir(sub)
    os.rmdir(top)


def restore_cgroups(before: HostState) -> list[str]:
    """Remove, depth first, the kubelet's cgroups that were not there before (they are empty once it stopped)."""
    done = []
    for path in read_cgroups():
        if path not in before.cgroups:
            try:
                _remove_cgroup_tree(Path(path))
            except OSError as exc:
                raise PlatformError(f"cannot remove cgroup {path} (a process still in it?): {exc}") from exc
            done.append(f"rmdir -p {path}")
    return done


def restore_links(before: HostState, names: tuple[str, ...]) -> list[str]:
    done = []
    for name in names:
        if name not in before.links and os.path.exists(f"/sys/class/net/{name}"):
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
            done.append(f"ip link del {name}")
    return done


def differences(before: HostState, after: HostState, mount_prefixes: tuple[str, ...]) -> list[str]:
    """Every way ``after`` differs from ``before`` (empty when the host is as it was); mounts are compared
    under ``mount_prefixes`` only (other programs' containers mount and unmount elsewhere all the time)."""
    diffs = []
    for name, value in before.sysctls.items():
        if after.sysctls.get(name) != value:
            diffs.append(f"sysctl {name}: {value} -> {after.sysctls.get(name)}")
    for command in sorted(set(before.iptables_rules) | set(after.iptables_rules)):
        old_tables, new_tables = before.iptables_rules.get(command, {}), after.iptables_rules.get(command, {})
        for table in sorted(set(old_tables) | set(new_tables)):
            added = set(new_tables.get(table, [])) - set(old_tables.get(table, []))
            removed = set(old_tables.get(table, [])) - set(new_tables.get(table, []))
            diffs += [f"{command} -t {table} added: {r}" for r in sorted(added)]
            diffs += [f"{command} -t {table} removed: {r}" for r in sorted(removed)]

    def ours(mounts: list[str]) -> set[str]:
        return {m for m in mounts if any(m == p or m.startswith(p + "/") for p in mount_prefixes)}

    diffs += [f"mount added: {m}" for m in sorted(ours(after.mounts) - ours(before.mounts))]
    diffs += [f"mount removed: {m}" for m in sorted(ours(before.mounts) - ours(after.mounts))]
    diffs += [f"dir {d}: existed {e} -> {after.dirs.get(d)}" for d, e in before.dirs.items() if after.dirs.get(d) != e]
    diffs += [f"cgroup added: {c}" for c in sorted(set(after.cgroups) - set(before.cgroups))]
    diffs += [f"link added: {n}" for n in sorted(set(after.links) - set(before.links))]
    diffs += [f"nft table added: {t}" for t in sorted(set(after.nft_tables) - set(before.nft_tables))]
    return diffs
