"""What `doctor` checks before several machines share one file root (docs/scaling.md).

The write path serialises writers with ``flock`` locks under ``MEMORY_ROOT/.locks``
(`facts.storage.locks`, through the filelock library). Across machines those locks only hold
when the file system's server arbitrates them:

- NFSv4 / NFSv4.1 (Amazon EFS is NFSv4.1): the Linux client turns ``flock`` into
  whole-file byte-range locks kept by the server, so they hold across clients, as long
  as the mount does not say ``local_lock=flock`` / ``local_lock=all`` or ``nolock``
  (those keep locks on the client: two machines would both "hold" a bucket).
- CephFS (kernel client or ceph-fuse): ``flock`` is arbitrated by the MDS.
- NFSv3 works through the separate NLM lock daemon (lockd/statd): accepted with a warning.
- SMB/CIFS, sshfs and other FUSE file systems: not supported.

The derived search index is SQLite, whose locking on a network file system is unsafe,
so with several machines it must live in a machine-local ``MEMORY_INDEX_DIR``.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from facts.storage.atomic import PRIVATE_FILE_MODE, make_private_dirs

NETWORK_TYPES = ("nfs", "nfs4", "ceph", "cifs", "smb3", "9p", "glusterfs", "lustre", "gpfs", "beegfs")
SUPPORTED_SHARED = ("nfs4", "ceph", "fuse.ceph-fuse")
CLIENT_ONLY_LOCKS = ("nolock", "local_lock=flock", "local_lock=all")


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    options: tuple[str, ...]

    @property
    def network(self) -> bool:
        return self.fstype in NETWORK_TYPES or self.fstype.startswith("fuse.")


def mount_of(path: Path, mountinfo: str | None = None) -> Mount | None:
    """The mount holding `path` (the longest mount point above it), from mountinfo."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    target = os.path.realpath(path)
    best: Mount | None = None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or len(tail) < 3:
            continue
        point = fields[4].replace("\\040", " ")
        if not (target == point or target.startswith(point.rstrip("/") + "/")):
            continue
        if best is None or len(point) >= len(best.point):
            # per-mount options and the file system's own (NFS puts vers, local_lock there)
            options = tuple(fields[5].split(",")) + tuple(tail[2].split(","))
            best = Mount(point, tail[0], options)
    return best


def lock_problem(mount: Mount) -> tuple[str, str] | None:
    """("fail"|"warn", why) when the root's locks would not hold across machines."""
    if not mount.network:
        return None
    blocking = [opt for opt in mount.options if opt in CLIENT_ONLY_LOCKS]
    if blocking:
        return "fail", f"mounted with {','.join(blocking)}: flock locks stay on each client, writers would collide"
    if mount.fstype == "nfs":
        version = next((opt.split("=", 1)[1] for opt in mount.options if opt.startswith(("vers=", "nfsvers="))), "")
        if version.startswith("4"):
            return None
        return "warn", "NFSv3: locks go through the NLM daemon (lockd/statd); NFSv4.1 is what is tested"
    if mount.fstype in SUPPORTED_SHARED:
        return None
    return "fail", f"{mount.fstype} is not a supported shared root (NFSv4/EFS or CephFS: their server arbitrates flock)"


def flock_enforced(folder: Path) -> bool:
    """Whether an exclusive flock on a file under `folder` refuses a second open file
    (what keeps two writers of one bucket apart; a file system that ignores locks
    grants both)."""
    make_private_dirs(folder)
    path = folder / "doctor-probe.lock"
    first = os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
    second = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(first, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            fcntl.flock(second, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False
    finally:
        os.close(second)
        os.close(first)


def index_is_shared(index_dir: Path, root: Path, mount: Mount | None) -> str | None:
    """Why the index directory is not machine-local, or None."""
    if mount is not None and mount.network:
        return f"it is on {mount.fstype} ({mount.point}): SQLite on a network file system is unsafe"
    real_index, real_root = os.path.realpath(index_dir), os.path.realpath(root)
    if real_index == real_root or real_index.startswith(real_root.rstrip("/") + "/"):
        return "it is under MEMORY_ROOT, which other machines share"
    return None
