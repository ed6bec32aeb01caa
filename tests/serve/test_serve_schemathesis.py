"""A schemathesis run against the OpenAPI spec of a live `trimtab serve`: whatever the generated requests, under the
admin token or a tenant's, the server never answers 5xx and never takes over 1 s. The server runs with an empty
PATH, so no generated command can run on this machine."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed (pip install schemathesis)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from serve_helpers import Server  # noqa: E402


@schemathesis.serializer("application/yaml")
def _yaml(ctx: object, value: object) -> bytes:
    return value.encode() if isinstance(value, str) else str(value).encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    empty = tmp_path_factory.mktemp("empty-path")
    server = Server(Path(tmp_path_factory.mktemp("schema")) / "data", "--gpus", "2", env={"PATH": str(empty)})
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tokens(server: Server) -> dict[str, str]:
    r = httpx.post(f"{server.url}/v1/tokens", json={"tenant": "team-a"},
                   headers={"Authorization": f"Bearer {server.admin_token}"})
    assert r.status_code == 201, r.text
    return {"admin": server.admin_token, "tenant": r.json()["token"]}


@pytest.mark.parametrize(("examples", "who"), [
    (15, "admin"),
    pytest.param(200, "admin", marks=pytest.mark.slow),
    pytest.param(200, "tenant", marks=pytest.mark.slow),
])
def test_no_request_makes_the_server_fail(server: Server, tokens: dict[str, str], examples: int, who: str) -> None:
    """Every operation of the spec, with generated valid and invalid inputs, under the admin or a tenant token: no
    answer is a 5xx, none takes over 1 s."""
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    headers = {"Authorization": f"Bearer {tokens[who]}"}
    failures: list[str] = []
    statuses: Counter[int] = Counter()
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def run(case: Any) -> None:
            response = case.call(headers=headers, timeout=10)
            statuses[response.status_code // 100] += 1
            if response.status_code >= 500 or response.elapsed > 1.0:
                failures.append(f"{case.method} {case.formatted_path} -> {response.status_code} in "
                                f"{response.elapsed:.2f} s: {response.text[:200]}")

        run()
    assert failures == []
    assert statuses[2] > 0 and statuses[4] > 0, statuses
