"""Who runs a tenant's tasks, and the tenant's own folders.

Run as root, the server runs each tenant's tasks as that tenant's Unix user: one the operator named
(`--tenant-user team-a=alice`), else a system user without login shell or home that the server creates on first
use (`trimtab-<tenant>`, or another free name) and records in `<data-dir>/tenant-users.json`: one user per tenant,
never one the server did not create, never two tenants on one user. Each tenant owns
`<data-dir>/tenants/<tenant>/` (mode 0700): its jobs' checkpoint folders and a working folder (the tasks' default
working directory and HOME). Everything else in the data dir (the store, the admin token, logs, the executor's
bookkeeping, the record of users) is the server's alone; the data dir itself is then 0711 so a tenant's task
can pass through it to its own folder without listing it.

Run as an ordinary user (or with `--shared-identity`), every task runs as the server's user: tenants share one
identity, and a task can read whatever the server can. The server says so at start and in `/v1/nodes`."""

from __future__ import annotations

import grp
import hashlib
import json
import logging
import os
import pwd
import re
import shutil
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("trimtab.serve")

TENANTS_DIR = "tenants"
USERS_FILE = "tenant-users.json"  # tenant -> {"user", "uid"} of the users this server created (the server's, 0600)
USER_PREFIX = "trimtab-"
MAX_USER_NAME = 32  # useradd's limit
_SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
_PLAIN_USER = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
# Not enforced beyond the variable (see docs/security.md): NVIDIA's device files are open to every local user, and
# no device cgroup or mount namespace fences a task in.
GPU_PINNING = "CUDA_VISIBLE_DEVICES only: a task that changes it can open every GPU of its machine"


@dataclass(frozen=True, slots=True)
class TaskUser:
    """The Unix identity a task runs as: its user, its primary group and no supplementary groups."""

    name: str
    uid: int
    gid: int


def user_name_for(tenant: str) -> str:
    """The first name tried for the Unix user of a tenant no operator mapped: `trimtab-<tenant>` when that is a
    valid user name of at most 32 characters, else a shortened lower-case form with a digest of the tenant's name
    (`trimtab-Team.A` -> `trimtab-team-a-3f1c2b9e`). Anyone can compute it, so it is only a first try: `Identities`
    takes the next free name when it is taken."""
    plain = USER_PREFIX + tenant
    if _PLAIN_USER.match(tenant) and len(plain) <= MAX_USER_NAME:
        return plain
    folded = re.sub(r"[^a-z0-9_-]", "-", tenant.lower())[:14]
    return f"{USER_PREFIX}{folded}-{hashlib.sha256(tenant.encode()).hexdigest()[:8]}"


def parse_tenant_users(pairs: list[str]) -> dict[str, str]:
    """`--tenant-user TENANT=USER` options as a mapping; ValueError naming the option for a malformed one."""
    mapping: dict[str, str] = {}
    for pair in pairs:
        tenant, sep, user = pair.partition("=")
        if not sep or not tenant or not user:
            raise ValueError(f"--tenant-user: expected TENANT=USER, not {pair!r}")
        mapping[tenant] = user
    return mapping


class Identities:
    """The tenants' identities and folders, asked by the Launcher for every task it starts.

    `isolated` True (the server is root and was not told to share its identity): `user_of` answers each tenant's
    TaskUser: the configured one, else the one recorded for it in USERS_FILE, else a user created for it now and
    recorded (see `_new_user`); an unknown configured user, or a mapping to root, is a ValueError at construction.
    False: `user_of` answers None (the server's own user)."""

    def __init__(self, data_dir: Path, *, isolated: bool = False, users: Mapping[str, str] | None = None,
                 shared_as: str | None = None) -> None:
        self.data_dir = data_dir
        self.isolated = isolated
        self.shared_as = shared_as  # who runs every task when not isolated, if not the server's user
        self.configured = dict(users or {})
        self._known: dict[str, TaskUser] = {}
        self._ready: set[str] = set()
        self._lock = threading.Lock()
        if self.configured and not isolated:
            raise ValueError("--tenant-user needs a server running as root (without --shared-identity)")
        for tenant, name in self.configured.items():
            self._known[tenant] = _existing_user(name, f"--tenant-user {tenant}={name}")
        self._made: dict[str, dict[str, object]] = {}  # USERS_FILE's record
        if isolated and (data_dir / USERS_FILE).exists():
            self._made = json.loads((data_dir / USERS_FILE).read_text())

    def describe(self) -> dict[str, object]:
        """For the start-up message and `/v1/nodes`: whether tenants are isolated, and how; how GPUs are pinned."""
        if self.isolated:
            detail = "each tenant's tasks run as its own Unix user (configured, or trimtab-<tenant>)"
        else:
            who = self.shared_as or f"{pwd.getpwuid(os.geteuid()).pw_name}, the server's user, and can read its files"
            detail = f"tenants share one identity: every task runs as {who}"
        return {"isolated": self.isolated, "detail": detail, "gpu_pinning": GPU_PINNING}

    def user_of(self, tenant: str) -> TaskUser | None:
        """The identity of `tenant`'s tasks (None: the server's own). Raises OSError if the user cannot be made."""
        if not self.isolated:
            return None
        with self._lock:
            if tenant not in self._known:
                made = self._made.get(tenant)
                self._known[tenant] = self._new_user(tenant) if made is None else _recorded_user(tenant, made)
            return self._known[tenant]

    def _new_user(self, tenant: str) -> TaskUser:
        """Create and record the user of `tenant`: `user_name_for(tenant)`, else the same with `-2`, `-3`, ...
        (shortened to fit), the first name that no recorded tenant has and no Unix user of this machine has yet
        (a user the server did not create is never adopted: name it with --tenant-user to use it)."""
        taken = {str(made["user"]) for made in self._made.values()}
        first = user_name_for(tenant)
        for n in range(1, 1000):
            name = first if n == 1 else f"{first[:MAX_USER_NAME - len(str(n)) - 1]}-{n}"
            if name in taken or _user_exists(name):
                continue
            user = _create_system_user(name)
            if user is None:  # made meanwhile by someone else
                continue
            self._made[tenant] = {"user": user.name, "uid": user.uid}
            self._save()
            return user
        raise OSError(f"no free Unix user name for tenant {tenant!r}")

    def _save(self) -> None:
        path = self.data_dir / USERS_FILE
        fresh = path.with_suffix(".tmp")
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(self._made, out, indent=1, sort_keys=True)
        os.replace(fresh, path)

    def tenant_dir(self, tenant: str) -> Path:
        return self.data_dir / TENANTS_DIR / tenant

    def checkpoint_dir(self, tenant: str, job_id: int) -> Path:
        return self.tenant_dir(tenant) / "checkpoints" / str(job_id)

    def work_dir(self, tenant: str) -> Path:
        return self.tenant_dir(tenant) / "work"

    def prepare_tenant(self, tenant: str, user: TaskUser | None) -> None:
        """Make `tenants/<tenant>/` (0700, owned by the tenant's user). Only this folder is made by the server:
        what lies below it is the tenant's, so the task makes it as its own user (a root server following a link
        a tenant planted there could be made to hand over any file)."""
        with self._lock:
            if tenant in self._ready:
                return
            root = self.tenant_dir(tenant)
            root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            root.mkdir(mode=0o700, exist_ok=True)
            if user is not None:  # `tenants/` is the server's, so `root` is no link a tenant could have planted
                os.chown(root, user.uid, user.gid, follow_symlinks=False)
            os.chmod(root, 0o700)
            self._ready.add(tenant)

    def workdir_problem(self, workdir: str | None) -> str | None:
        """Why a job may not use `workdir` (None: it may): not `/`, and not the data dir or anything in it."""
        if workdir is None:
            return None
        if not os.path.isabs(workdir):
            return f"workdir {workdir!r} is not an absolute path"
        real = Path(os.path.realpath(workdir))
        data = Path(os.path.realpath(self.data_dir))
        if real == Path("/"):
            return "workdir may not be /"
        if real == data or data in real.parents:
            return f"workdir {workdir!r} is in the server's data dir"
        return None


def _existing_user(name: str, where: str) -> TaskUser:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise ValueError(f"{where}: no Unix user {name!r} on this machine") from None
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise ValueError(f"{where}: a tenant may not run as root or in the root group")
    return TaskUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _recorded_user(tenant: str, made: Mapping[str, object]) -> TaskUser:
    """The user recorded for `tenant`, checked to be the one created for it (same uid)."""
    user = _existing_user(str(made["user"]), f"{USERS_FILE}: tenant {tenant}")
    if user.uid != made["uid"]:
        raise OSError(f"{USERS_FILE}: the Unix user {user.name} made for tenant {tenant} had uid {made['uid']}, "
                      f"now {user.uid}: it is not the user trimtab created")
    return user


def _create_system_user(name: str) -> TaskUser | None:
    """The system user `name`, created now (with its own group, no home, no login shell); None if it exists."""
    useradd = shutil.which("useradd", path=_SYSTEM_PATH)
    shell = next((s for s in ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false") if os.path.exists(s)), "/bin/false")
    if useradd is None:
        raise OSError(f"cannot create the Unix user {name}: no useradd in {_SYSTEM_PATH}")
    done = subprocess.run([useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                           "--shell", shell, name], capture_output=True, text=True, env={"PATH": _SYSTEM_PATH},
                          check=False)
    if done.returncode == 9:  # it exists
        return None
    if done.returncode != 0:
        raise OSError(f"cannot create the Unix user {name}: {done.stderr.strip() or done.returncode}")
    log.warning("created Unix user %s (group %s) for a tenant", name, grp.getgrgid(pwd.getpwnam(name).pw_gid).gr_name)
    return _existing_user(name, "tenant user")
