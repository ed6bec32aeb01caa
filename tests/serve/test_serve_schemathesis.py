"""A schemathesis run against the OpenAPI spec of a live `trimtab serve`: whatever the generated requests, the server
never answers 5xx. The server runs with an empty PATH, so no generated command can run on this machine."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@pytest.mark.parametrize("examples", [15, pytest.param(200, marks=pytest.mark.slow)])
def test_no_request_makes_the_server_fail(server: Server, examples: int) -> None:
    """Every operation of the spec, with generated valid and invalid inputs: no answer is a 5xx."""
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    headers = {"Authorization": f"Bearer {server.admin_token}"}
    failures: list[str] = []
    statuses: Counter[int] = Counter()
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def run(case: Any) -> None:
            response = case.call(headers=headers)
            statuses[response.status_code // 100] += 1
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path} -> {response.status_code}: "
                                f"{response.text[:200]}")

        run()
    assert failures == []
    assert statuses[2] > 0 and statuses[4] > 0, statuses
