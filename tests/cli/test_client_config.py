"""The client finds its server and says where it looked: `trimtab login` and `trimtab config` write the user's config
file (XDG_CONFIG_HOME honoured, 0600); server and token come from the flag, the environment, the config file or the
default, in that order; a connection error and a 401 name the URL or token used, where it came from and the ways
to give another; `trimtab submit missing.yaml` is an error about the file."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import Result
from serve_helpers import Server, free_port

from trimtab.serve.http.client import DEFAULT_SERVER, config_file, read_config, resolve, server_url


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user of their own: HOME and XDG_CONFIG_HOME in tmp_path, no TRIMTAB_* variables."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("TRIMTAB_SERVER", raising=False)
    monkeypatch.delenv("TRIMTAB_TOKEN", raising=False)
    return tmp_path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("client") / "data", "--gpus", "1").start()
    yield server
    server.stop()


def trimtab(*args: str) -> Result:
    from typer.testing import CliRunner

    from trimtab.cli import app

    return CliRunner().invoke(app, list(args))


def one_line(result: Result) -> str:
    """The output with Rich's line wrapping undone."""
    return " ".join(result.output.split())


def test_the_config_file_is_under_xdg_config_home_else_dot_config(tmp_path: Path) -> None:
    assert config_file({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "trimtab" / "config.yaml"
    assert config_file({}) == Path("~/.config/trimtab/config.yaml").expanduser()
    assert config_file({"XDG_CONFIG_HOME": "relative/dir"}) == Path("~/.config/trimtab/config.yaml").expanduser()


def test_config_set_writes_a_file_only_the_user_reads_and_show_says_where_each_setting_comes_from(
        home: Path) -> None:
    path = home / "xdg" / "trimtab" / "config.yaml"
    assert "server http://127.0.0.1:8470 (from the default)" in one_line(trimtab("config", "show"))
    assert trimtab("config", "set", "server", "gpu-box:8470").exit_code == 0
    assert trimtab("config", "set", "token", "tt_secret1234").exit_code == 0
    assert read_config(path) == {"server": "http://gpu-box:8470", "token": "tt_secret1234"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    shown = one_line(trimtab("config", "show"))
    assert f"server http://gpu-box:8470 (from the config file {path})" in shown
    assert f"token ...1234 (from the config file {path})" in shown and "secret" not in shown
    assert trimtab("config", "unset", "token").exit_code == 0
    assert read_config(path) == {"server": "http://gpu-box:8470"}
    bad = trimtab("config", "set", "colour", "red")
    assert bad.exit_code == 2 and "unknown setting 'colour'; settings: server, token" in one_line(bad)


def test_flag_then_environment_then_config_file_then_default(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("server: http://from-file:1\ntoken: file-token\n")
    env = {"TRIMTAB_SERVER": "from-env:2", "TRIMTAB_TOKEN": "env-token"}
    flag = resolve("http://from-flag:3", "flag-token", env, path)
    assert (flag.server, flag.server_from, flag.token, flag.token_from) == (
        "http://from-flag:3", "--server", "flag-token", "--token")
    by_env = resolve(None, None, env, path)
    assert (by_env.server, by_env.server_from, by_env.token_from) == ("http://from-env:2", "TRIMTAB_SERVER",
                                                                      "TRIMTAB_TOKEN")
    by_file = resolve(None, None, {}, path)
    assert (by_file.server, by_file.token, by_file.server_from) == ("http://from-file:1", "file-token",
                                                                     f"the config file {path}")
    assert resolve(None, None, {}, tmp_path / "none.yaml").server_from == "the default"
    path.write_text("server: [1, 2]\nport: 3\n")
    with pytest.raises(ValueError, match=f"{path}: the client's config file holds a mapping of server and token"):
        resolve(None, None, {}, path)
    assert server_url("https://x.example/") == "https://x.example"
    with pytest.raises(ValueError, match="expected a URL"):
        server_url("ftp://x")


def test_a_connection_error_says_which_url_from_where_and_the_three_ways_elsewhere(home: Path) -> None:
    port = free_port()
    trimtab("config", "set", "server", f"127.0.0.1:{port}")
    result = trimtab("jobs")
    text = one_line(result)
    assert result.exit_code == 1
    path = home / "xdg" / "trimtab" / "config.yaml"
    assert f"cannot reach http://127.0.0.1:{port} (the server given by the config file {path})" in text
    assert "--server URL" in text and "TRIMTAB_SERVER=URL" in text and "trimtab login URL" in text
    assert DEFAULT_SERVER in text


def test_a_401_says_which_token_was_sent_and_where_tokens_come_from(home: Path, server: Server,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = home / "xdg" / "trimtab" / "config.yaml"
    none_sent = one_line(trimtab("jobs", "--server", server.url))
    assert "missing bearer token" in none_sent and "no token was sent" in none_sent
    assert "--token T" in none_sent and "TRIMTAB_TOKEN=T" in none_sent and f"config file {path}" in none_sent
    assert "(HTTP 401)" in none_sent and "a server's admin token is in its data dir" in none_sent
    admin_file = home / ".local" / "share" / "trimtab" / "admin.token"
    admin_file.parent.mkdir(parents=True)
    admin_file.write_text("not-this-servers-token\n")
    stale = one_line(trimtab("jobs", "--server", server.url))
    assert "unknown token: the token sent came from the admin token file ~/.local/share/trimtab/admin.token" in stale
    assert "is in ~/.local/share/trimtab/admin.token" in stale
    monkeypatch.setenv("TRIMTAB_TOKEN", "wrong")
    assert "the token sent came from TRIMTAB_TOKEN" in one_line(trimtab("jobs", "--server", server.url))


def test_login_checks_the_server_and_token_then_saves_them(home: Path, server: Server) -> None:
    path = home / "xdg" / "trimtab" / "config.yaml"
    refused = trimtab("login", server.url, "--token", "wrong")
    assert refused.exit_code == 1 and "unknown token" in refused.output and "nothing saved" in one_line(refused)
    assert not path.exists()
    unreachable = trimtab("login", f"127.0.0.1:{free_port()}")
    assert unreachable.exit_code == 1 and "cannot reach" in unreachable.output and not path.exists()
    done = trimtab("login", server.url, "--token", server.admin_token)
    assert done.exit_code == 0, done.output
    assert read_config(path) == {"server": server.url, "token": server.admin_token}
    listed = trimtab("jobs", "--json")  # no flag, no environment: the config file finds the server
    assert listed.exit_code == 0, listed.output
    trimtab("login", f"127.0.0.1:{free_port()}", "--no-check")
    assert "token" not in read_config(path)  # a token saved for another server is dropped


def test_submitting_a_missing_manifest_is_an_error_about_the_file(home: Path) -> None:
    result = trimtab("submit", "missing.yaml")
    assert result.exit_code == 2
    assert "missing.yaml: no such file" in result.output and "executable" not in result.output
