"""Tests of gradcore/book/install.py: pip's configuration handed to uv, and the fallback to pip."""

from __future__ import annotations

import subprocess
import sys

from gradcore.book import install

# `pip config list` shaped like this project's CI machines' (a find-links folder from the
# environment, local indexes and a version cap from the global file), plus a global find-links and
# certificate that the environment overrides, an [install] index and a [download] one pip install
# does not read.
LISTING = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.find-links='/elsewhere/wheels'
global.cert='/etc/ssl/certs/other.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
install.index-url='https://mirror.example/simple'
download.index-url='https://ignored.example/simple'
not a setting
"""


def test_pip_config_becomes_uv_options():
    config = install.parse_pip_config(LISTING)
    # The environment overrides the global file, also for a repeated key (as in pip).
    assert config["cert"] == ["/etc/ssl/certs/ca-certificates.crt"]
    assert config["find-links"] == ["/opt/wheels"]
    assert config["extra-index-url"] == ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"]
    # [install] is read, [download] is not.
    assert config["index-url"] == ["https://mirror.example/simple"]
    options, environment = install.uv_options(config)
    assert options == [
        "--index-strategy", "unsafe-best-match",
        "--index-url", "https://mirror.example/simple",
        "--extra-index-url", "file:///opt/pypi/simple",
        "--extra-index-url", "file:///opt/pypi-more/simple",
        "--find-links", "/opt/wheels",
        "--constraint", "/etc/xdg/pip/constraints.txt",
    ]  # fmt: skip
    assert environment == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"}


def test_no_configuration_means_uv_defaults():
    assert install.uv_options(install.parse_pip_config("")) == (
        ["--index-strategy", "unsafe-best-match"], {})
    options, _ = install.uv_options(install.parse_pip_config("global.no-index='true'\n"))
    assert "--no-index" in options


def test_uv_failure_falls_back_to_pip(monkeypatch, tmp_path):
    calls, real_call = [], subprocess.call
    uv = tmp_path / "uv"
    uv.write_text("#!/bin/sh\nexit 3\n")
    uv.chmod(0o755)
    monkeypatch.setattr(install, "_uv", lambda: str(uv))

    def call(command, env=None):
        calls.append(command)
        return real_call(command, env=env) if command[0] == str(uv) else 0

    monkeypatch.setattr(install.subprocess, "call", call)
    assert install.main(["--no-deps", "example==1.0"]) == 0
    assert calls[0][:3] == [str(uv), "pip", "install"]
    assert calls[1] == [sys.executable, "-m", "pip", "install", "-q", "--no-compile",
                        "--no-deps", "example==1.0"]


def test_no_arguments_is_a_usage_error(capsys):
    assert install.main([]) == 2
    assert "Usage" in capsys.readouterr().err
