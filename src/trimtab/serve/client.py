"""The HTTP client of `trimtab serve`, used by the CLI commands: where the server is, which token to send, and one
method per API call. Server and token come from arguments, the environment or ~/.config/trimtab/config.yaml."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from trimtab.serve.defaults import DEFAULT_DATA_DIR, DEFAULT_PORT
from trimtab.serve.errors import ServeError

CONFIG_FILE = Path("~/.config/trimtab/config.yaml")
DEFAULT_SERVER = f"http://127.0.0.1:{DEFAULT_PORT}"


@dataclass(frozen=True, slots=True)
class Target:
    server: str
    token: str | None


def resolve(server: str | None, token: str | None, env: Mapping[str, str] | None = None,
            config_file: Path | None = None) -> Target:
    """Server and token: the argument, else TRIMTAB_SERVER / TRIMTAB_TOKEN, else the config file's `server` /
    `token`, else the default local server and, if readable, the admin token of the default data dir."""
    env = os.environ if env is None else env
    config: dict[str, Any] = {}
    path = (config_file or CONFIG_FILE).expanduser()
    if path.exists():
        loaded = yaml.safe_load(path.read_text())
        config = loaded if isinstance(loaded, dict) else {}
    server = server or env.get("TRIMTAB_SERVER") or config.get("server") or DEFAULT_SERVER
    token = token or env.get("TRIMTAB_TOKEN") or config.get("token")
    if token is None:
        admin_file = DEFAULT_DATA_DIR.expanduser() / "admin.token"
        if admin_file.exists() and os.access(admin_file, os.R_OK):
            token = admin_file.read_text().strip()
    return Target(str(server).rstrip("/"), token)


class Client:
    """One method per API call; each returns the decoded JSON or raises ServeError."""

    def __init__(self, target: Target, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
        self.http = httpx.Client(base_url=target.server, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self.http.close()

    def _call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            response = self.http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise ServeError(0, f"cannot reach {self.http.base_url}: {exc}") from None
        if response.status_code >= 400:
            try:
                body = response.json()
                detail, field = str(body.get("detail", response.text)), str(body.get("field", ""))
            except ValueError:
                detail, field = response.text or response.reason_phrase, ""
            raise ServeError(response.status_code, detail, field)
        return response

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

    def set_quota(self, tenant: str, quota_gpus: int | None) -> dict[str, Any]:
        return self._call("PUT", f"/v1/tenants/{tenant}", json={"quota_gpus": quota_gpus}).json()
