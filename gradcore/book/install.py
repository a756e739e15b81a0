"""Install packages into this interpreter's environment with uv, falling back to pip.

``make venv`` (and so ``make book`` and ``make test``) runs this file as a script, before gradcore
is installed: it uses the standard library only. uv installs the pinned test environment in about
7 s where ``pip install --no-compile`` took about 63 s (same machine, same pins, same versions; see
the README, "Two commands"), and every CI run pays for that install.

uv does not read pip's configuration, so the options that say *where* packages come from (index,
extra indexes, find-links, constraints, certificate) are read from ``pip config list`` and passed
on: both installers then see the same registries and the same caps. Where uv cannot be had or
fails, pip installs the same arguments, and its error is the one shown.

Usage: ``python gradcore/book/install.py [pip install arguments]``, for example
``python gradcore/book/install.py -e ".[test]" -c constraints.txt``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

#: The uv release bootstrapped into the environment with pip (its binary is a wheel: no build).
UV_VERSION = "0.13.9"

#: pip configuration keys (``pip config list``) -> uv ``pip install`` option; multi-valued keys
#: hold whitespace-separated values, each passed as its own option.
_REPEATED = {
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}
#: The sections of ``pip config list`` that ``pip install`` reads, weakest first: the files'
#: ``[global]`` and ``[install]`` sections, then ``PIP_*`` environment variables (``:env:``).
_SECTIONS = ("global", "install", ":env:")


def parse_pip_config(listing: str) -> dict[str, list[str]]:
    """``pip config list`` output -> ``{key: [values]}``, as ``pip install`` would read it.

    Lines look like ``global.extra-index-url='file:///a file:///b'`` or ``:env:.find-links='/x'``;
    other sections (``[download]``, ...) are ignored. As in pip, a key takes its strongest
    section's value (the environment over ``[install]`` over ``[global]``); the value of a
    repeated key (:data:`_REPEATED`) is split on whitespace into its entries.
    """
    strongest: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        name, sep, raw = line.partition("=")
        section, dot, key = name.strip().rpartition(".")
        value = raw.strip().strip("'\"")
        if sep and dot and section in _SECTIONS and value:
            rank = _SECTIONS.index(section)
            if key not in strongest or rank >= strongest[key][0]:
                strongest[key] = (rank, value)
    return {
        key: value.split() if key in _REPEATED else [value] for key, (_, value) in strongest.items()
    }


def uv_options(config: dict[str, list[str]]) -> tuple[list[str], dict[str, str]]:
    """pip's configuration as uv options and environment variables.

    ``unsafe-best-match`` makes uv pick, like pip, the best version across all indexes (uv's
    default takes the first index that has the package at all).
    """
    options = ["--index-strategy", "unsafe-best-match"]
    environment = {}
    if "index-url" in config:
        options += ["--index-url", config["index-url"][0]]
    if config.get("no-index", ["false"])[0].lower() in ("1", "true", "yes", "on"):
        options.append("--no-index")
    for key, flag in _REPEATED.items():
        for value in config.get(key, []):
            options += [flag, value]
    if "cert" in config:
        environment["SSL_CERT_FILE"] = config["cert"][0]
    return options, environment


def _pip_install(*arguments: str) -> int:
    """pip as the Makefile ran it before uv: quiet, no bytecode at install."""
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-compile"]
    return subprocess.call([*pip, *arguments])


def _uv() -> str | None:
    """The environment's uv, installed with pip on first use; None where that fails."""
    uv = Path(sys.executable).with_name("uv")
    if not uv.exists():
        if _pip_install(f"uv=={UV_VERSION}") != 0:
            return None
    return str(uv) if uv.exists() else None


def main(arguments: list[str]) -> int:
    if not arguments:
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 2
    uv = _uv()
    if uv is not None:
        listing = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
        ).stdout
        options, extra_environment = uv_options(parse_pip_config(listing))
        # No bytecode at install, as pip --no-compile: each module compiles on its first import.
        command = [uv, "pip", "install", "-q", "--python", sys.executable, *options, *arguments]
        environment = {**os.environ, "UV_LINK_MODE": "copy", **extra_environment}
        if subprocess.call(command, env=environment) == 0:
            return 0
        print(f"uv failed ({shlex.join(command)}); installing with pip instead", file=sys.stderr)
    return _pip_install(*arguments)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
