"""The HTTP client of `trimtab serve`, used by the CLI commands: where the server is, which token to send, where
each came from (so that an error can say where the client looked), the user's config file that `trimtab login`
and `trimtab config` write, and one method per API call."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from trimtab.formats import yaml_document
from trimtab.serve.defaults import DEFAULT_DATA_DIR, DEFAULT_PORT
from trimtab.serve.errors import ServeError

DEFAULT_SERVER = f"http://127.0.0.1:{DEFAULT_PORT}"
CONFIG_KEYS = ("server", "token")
ADMIN_TOKEN_FILE = DEFAULT_DATA_DIR / "admin.token"  # the admin token of a server with the default data dir


def config_file(env: Mapping[str, str] | None = None) -> Path:
    """The user's client config file: $XDG_CONFIG_HOME/trimtab/config.yaml, else ~/.config/trimtab/config.yaml."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else Path("~/.config").expanduser()
    return root / "trimtab" / "config.yaml"


def read_config(path: Path) -> dict[str, str]:
    """The settings of the config file at `path` ({} when there is none); a ValueError naming the file when it is
    not a YAML mapping of `server` and `token`."""
    if not path.exists():
        return {}
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the client's config file: {exc.strerror or exc}") from None
    data = yaml_document(text, f"the client's config file {path}")  # a FormatError names the file and line
    data = {} if data is None else data
    if not isinstance(data, dict) or not set(data) <= set(CONFIG_KEYS):
        raise ValueError(f"{path}: the client's config file holds a mapping of {' and '.join(CONFIG_KEYS)}, got "
                         f"{data!r}; rewrite it with `trimtab config set KEY VALUE`")
    return {str(key): str(value) for key, value in data.items()}


def write_config(path: Path, settings: Mapping[str, str | None]) -> dict[str, str]:
    """Merge `settings` into the config file at `path` (None removes a key) and return what it now holds. The file
    is readable by the user alone (0600: it may hold a token), its folder made if missing (0700)."""
    merged = read_config(path)
    for key, value in settings.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file made before with wider rights is narrowed too
    with os.fdopen(fd, "w") as stream:
        stream.write(yaml.safe_dump(merged, sort_keys=False))
    return merged


def server_url(address: str) -> str:
    """A server address as the client uses it: `host:port` becomes http://host:port; no trailing slash."""
    url = address.strip().rstrip("/")
    url = url if "://" in url else f"http://{url}"
    if not url.startswith(("http://", "https://")) or url.endswith("://"):
        raise ValueError(f"server {address!r}: expected a URL such as http://HOST:PORT (or HOST:PORT)")
    return url


@dataclass(frozen=True, slots=True)
class Target:
    """The server and token a client uses, with where each came from (`server_from`, `token_from`: "" when no
    token is sent) and the config file the client read, so that `unreachable` and `unauthorised` can say where the
    client looked and how to point it elsewhere."""

    server: str
    token: str | None
    server_from: str = "the argument"
    token_from: str = ""
    config: Path | None = None

    def unreachable(self, problem: object) -> str:
        """The message of a connection error."""
        config = self.config or config_file()
        return (f"cannot reach {self.server} (the server given by {self.server_from}): {problem}. The client takes "
                f"the server from --server URL, else TRIMTAB_SERVER=URL, else the config file {config} (written by "
                f"`trimtab login URL` or `trimtab config set server URL`), else {DEFAULT_SERVER}")

    def unauthorised(self, detail: str) -> str:
        """The message of a 401 answer: the server's `detail`, the token sent and where else one may come from."""
        config = self.config or config_file()
        sent = f"the token sent came from {self.token_from}" if self.token else "no token was sent"
        admin = (f"; the admin token of a server on this machine with the default data dir is in "
                 f"{ADMIN_TOKEN_FILE} (readable by the user who runs it)" if ADMIN_TOKEN_FILE.expanduser().exists()
                 else "; a server's admin token is in its data dir, admin.token")
        return (f"{detail}: {sent}. The client takes the token from --token T, else TRIMTAB_TOKEN=T, else the config "
                f"file {config} (written by `trimtab login {self.server} --token T` or `trimtab config set token T`)"
                f"{admin}")


def resolve(server: str | None, token: str | None, env: Mapping[str, str] | None = None,
            config_path: Path | None = None) -> Target:
    """Server and token, with where each came from: the argument (the --server / --token flag), else TRIMTAB_SERVER /
    TRIMTAB_TOKEN, else the config file's `server` / `token`, else the default local server and, if readable, the
    admin token of the default data dir. A ValueError names a config file that cannot be read."""
    env = os.environ if env is None else env
    path = config_path or config_file(env)
    config = read_config(path)
    in_config = f"the config file {path}"
    server_from, url = next((source, value) for source, value in (
        ("--server", server), ("TRIMTAB_SERVER", env.get("TRIMTAB_SERVER")), (in_config, config.get("server")),
        ("the default", DEFAULT_SERVER)) if value)
    token_from, secret = next(((source, value) for source, value in (
        ("--token", token), ("TRIMTAB_TOKEN", env.get("TRIMTAB_TOKEN")), (in_config, config.get("token"))) if value),
        ("", None))
    admin_file = ADMIN_TOKEN_FILE.expanduser()
    if secret is None and admin_file.exists() and os.access(admin_file, os.R_OK):
        token_from, secret = f"the admin token file {ADMIN_TOKEN_FILE}", admin_file.read_text().strip()
    return Target(server_url(url), secret, server_from, token_from, path)


class Client:
    """One method per API call; each returns the decoded JSON or raises ServeError."""

    def __init__(self, target: Target, timeout_s: float = 30.0) -> None:
        self.target = target
        headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
        self.http = httpx.Client(base_url=target.server, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self.http.close()

    def _call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            response = self.http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise ServeError(0, self.target.unreachable(exc)) from None
        if response.status_code >= 400:
            try:
                body = response.json()
                detail, field = str(body.get("detail", response.text)), str(body.get("field", ""))
            except ValueError:
                detail, field = response.text or response.reason_phrase, ""
            if response.status_code == 401:
                detail = self.target.unauthorised(detail)
            raise ServeError(response.status_code, detail, field)
        return response

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/healthz").json()

    def submit_job(self, job: Mapping[str, Any]) -> dict[str, Any]:
        return self._call("POST", "/v1/jobs", json=dict(job)).json()

    def submit_manifest(self, text: str) -> dict[str, Any]:
        return self._call("POST", "/v1/jobs", content=text.encode(),
                          headers={"Content-Type": "application/yaml"}).json()

    def jobs(self, state: str | None = None, limit: int = 1000, after_id: int = 0) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit, "after_id": after_id}
        if state:
            params["state"] = state
        return self._call("GET", "/v1/jobs", params=params).json()["jobs"]

    def job(self, job_id: int) -> dict[str, Any]:
        return self._call("GET", f"/v1/jobs/{job_id}").json()

    def why(self, job_id: int) -> dict[str, Any]:
        return self._call("GET", f"/v1/jobs/{job_id}/why").json()

    def cancel(self, job_id: int) -> dict[str, Any]:
        return self._call("POST", f"/v1/jobs/{job_id}/cancel").json()

    def logs(self, job_id: int, offset: int = 0, rank: int = 0,
             attempt: int | None = None) -> tuple[bytes, int, bool, int, int]:
        """(data, next offset, done, attempt read, latest attempt) of a task's output from `offset`."""
        params: dict[str, Any] = {"offset": offset, "rank": rank}
        if attempt is not None:
            params["attempt"] = attempt
        r = self._call("GET", f"/v1/jobs/{job_id}/logs", params=params)
        h = r.headers
        return (r.content, int(h.get("X-Trimtab-Offset", offset)), h.get("X-Trimtab-Done") == "1",
                int(h.get("X-Trimtab-Attempt", 0)), int(h.get("X-Trimtab-Latest", 0)))

    def nodes(self) -> dict[str, Any]:
        return self._call("GET", "/v1/nodes").json()

    def queues(self) -> dict[str, Any]:
        return self._call("GET", "/v1/queues").json()

    def create_token(self, tenant: str, quota_gpus: int | None, name: str = "") -> dict[str, Any]:
        return self._call("POST", "/v1/tokens", json={"tenant": tenant, "quota_gpus": quota_gpus,
                                                        "name": name}).json()

    def tokens(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/tokens").json()["tokens"]

    def revoke_token(self, token_id: int) -> dict[str, Any]:
        return self._call("DELETE", f"/v1/tokens/{token_id}").json()

    def set_quota(self, tenant: str, quota_gpus: int | None) -> dict[str, Any]:
        return self._call("PUT", f"/v1/tenants/{tenant}", json={"quota_gpus": quota_gpus}).json()
