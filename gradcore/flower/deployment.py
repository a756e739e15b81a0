"""Flower's deployment engine on this machine: a SuperLink and N SuperNodes on loopback, started and
stopped.

The processes are Flower's own command-line tools (``flower-superlink``, ``flower-supernode``,
``flwr run``), exactly as an operator would start them on several hosts, here all on
127.0.0.1 with every outbound feature off: telemetry and the update check (both, or the
SuperLink still looks names up), runtime dependency installation, and Flower's default
connection file (it lists a remote SuperLink; ours names only the local one).

Two layers of processes, so that nothing can outlive a run:

* :func:`serve` (run by :func:`launch` in a process of its own) starts the SuperLink and
  the SuperNodes, runs the app once and stops every process it started, whole trees, by PID;
* :func:`launch`, called by :func:`gradcore.flower.run`, starts :func:`serve` in a fresh
  network namespace where only loopback exists (``unshare --net``, where the kernel allows
  it), watches the whole tree while it runs (memory, and every socket's address) and kills
  whatever is left at the end, also on error, interrupt or timeout.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .. import validation as check

#: The Flower release this module is written and tested against.
FLOWER_VERSION = "1.42.0"
INSTALL_HINT = (
    f'pip install "flwr=={FLOWER_VERSION}"  (or `make venv`, which installs the test extras)'
)
#: Every outbound feature of Flower switched off (telemetry, update check).
OFFLINE_ENVIRONMENT = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}
LOOPBACK = "127.0.0.1"
CONNECTION = "gradcore"
APP_PACKAGE = "gradcore_curious"
#: What :func:`launch` runs in its child process.
SERVE = "import sys; from gradcore.flower.deployment import serve; serve(sys.argv[1])"


def require_flower() -> str:
    """The installed Flower version; a clear error when it is missing or not the tested one."""
    try:
        import flwr
    except ImportError:
        raise check.GradcoreValueError(f"Flower is not installed: {INSTALL_HINT}") from None
    version = getattr(flwr, "__version__", None) or _distribution_version()
    if version != FLOWER_VERSION:
        raise check.GradcoreValueError(
            f"gradcore.flower is tested with Flower {FLOWER_VERSION}, found {version}: "
            f"{INSTALL_HINT}"
        )
    for tool in ("flower-superlink", "flower-supernode", "flower-superexec", "flwr"):
        if _tool(tool) is None:
            raise check.GradcoreValueError(
                f"{tool} is not on PATH nor beside {sys.executable}: {INSTALL_HINT}"
            )
    return version


def _distribution_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    with contextlib.suppress(PackageNotFoundError):
        return version("flwr")
    return None


def _tool(name: str) -> str | None:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def check_port_free(port: int) -> None:
    """Refuse a port that another process holds, naming it (Flower's own message is a stack
    trace)."""
    check.integer("port", port, low=1, high=65535)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((LOOPBACK, port))
        except OSError:
            raise check.GradcoreValueError(
                f"port {port} on {LOOPBACK} is taken by another process: pass another port, or "
                "none to pick free ones"
            ) from None


def _app_files(setup: dict, schedule: list) -> dict:
    config = f"setup = '''{json.dumps(setup)}'''\nschedule = '''{json.dumps(schedule)}'''\n"
    return {
        "pyproject.toml": (
            "[build-system]\nrequires = [\"hatchling\"]\nbuild-backend = \"hatchling.build\"\n\n"
            "[project]\nname = \"gradcore-curious\"\nversion = \"1.0.0\"\n"
            "description = \"The gradcore book's deployment: FedAvg clients and a curious "
            "server\"\n"
            "license = \"MIT\"\ndependencies = []\n\n"
            "[tool.hatch.build.targets.wheel]\npackages = [\".\"]\n\n"
            "[tool.flwr.app]\npublisher = \"gradcore\"\n\n"
            f"[tool.flwr.app.components]\nserverapp = \"{APP_PACKAGE}.server:app\"\n"
            f"clientapp = \"{APP_PACKAGE}.client:app\"\n\n"
            f"[tool.flwr.app.config]\n{config}"
        ),
        f"{APP_PACKAGE}/__init__.py": (
            '"""The apps live in gradcore.flower.app; this project only names them."""\n'
        ),
        f"{APP_PACKAGE}/server.py": (
            "from gradcore.flower import app as gradcore_app\n\napp = gradcore_app.server_app\n"
        ),
        f"{APP_PACKAGE}/client.py": (
            "from gradcore.flower import app as gradcore_app\n\napp = gradcore_app.client_app\n"
        ),
    }


def write_app(directory: str | Path, setup: dict, schedule: list) -> Path:
    """The Flower app project (``pyproject.toml`` and two one-line modules) for this setup and
    schedule."""
    root = Path(directory) / "app"
    for name, text in _app_files(setup, schedule).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def environment(home: Path) -> dict:
    """The environment of every Flower process: offline, Flower's home inside the run's folder."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, **OFFLINE_ENVIRONMENT, "FLWR_HOME": str(home), "PATH": path}


def _connection_file(home: Path, port: int) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f"[superlink]\ndefault = \"{CONNECTION}\"\n\n[superlink.{CONNECTION}]\n"
        f"address = \"{LOOPBACK}:{port}\"\ninsecure = true\n"
    )


def stop_tree(pid: int, timeout: float = 10.0) -> list[int]:
    """Terminate a process and all its descendants (SIGTERM, then SIGKILL); the PIDs that were
    stopped."""
    try:
        root = psutil.Process(pid)
        tree = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return []
    for process in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(tree, timeout=timeout)
    for process in alive:  # SuperNodes' children outlive a SIGTERM
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(alive, timeout=timeout)
    return [process.pid for process in tree]


def _wait_for_port(
    port: int, process: subprocess.Popen, timeout: float, name: str, log: Path
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"{name} exited with code {process.returncode} before listening on port {port}:\n"
                f"{_tail(log)}"
            )
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            if probe.connect_ex((LOOPBACK, port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(
        f"{name} did not listen on port {port} within {timeout:.0f} s:\n{_tail(log)}"
    )


def _tail(path: Path, lines: int = 25) -> str:
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def bring_loopback_up() -> None:
    """Set ``lo`` up (a new network namespace starts with it down); SIOCGIFFLAGS / SIOCSIFFLAGS."""
    get_flags, set_flags, up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as control:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(control, get_flags, request))[1]
        fcntl.ioctl(control, set_flags, struct.pack("16sH14x", b"lo", flags | up))


def serve(directory: str | Path) -> dict:
    """Start the SuperLink and the SuperNodes, run the app once, stop them all; what happened, as a
    dict.

    Reads ``DIRECTORY/request.json`` (clients, port, timeout, whether to set loopback up),
    writes each process's output under ``DIRECTORY/logs`` and the summary to
    ``DIRECTORY/served.json``.
    """
    directory = Path(directory)
    request = json.loads((directory / "request.json").read_text())
    if request["loopback_up"]:
        bring_loopback_up()
    home, logs = directory / "home", directory / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = environment(home)
    port = request["port"] or free_port()
    check_port_free(port)
    _connection_file(home, port)
    started, summary = [], {"port": port, "pids": []}
    start = time.perf_counter()

    def spawn(name: str, arguments: list) -> subprocess.Popen:
        log = (logs / f"{name}.log").open("w")
        process = subprocess.Popen(
            [_tool(arguments[0]), *arguments[1:]],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=directory,
            start_new_session=True,
        )
        started.append(process)
        summary["pids"].append(process.pid)
        return process

    try:
        superlink = spawn(
            "superlink",
            [
                "flower-superlink",
                "--insecure",
                "--host",
                LOOPBACK,
                "--port",
                str(port),
                "--disable-runtime-dependency-installation",
            ],
        )
        _wait_for_port(port, superlink, request["timeout"], "the SuperLink", logs / "superlink.log")
        for partition_id in range(request["clients"]):
            node_port = free_port()
            spawn(
                f"supernode-{partition_id}",
                [
                    "flower-supernode",
                    "--insecure",
                    "--superlink",
                    f"{LOOPBACK}:{port}",
                    "--host",
                    LOOPBACK,
                    "--port",
                    str(node_port),
                    "--node-config",
                    f"partition-id={partition_id} num-partitions={request['clients']}",
                ],
            )
        summary["started_seconds"] = time.perf_counter() - start
        with (logs / "run.log").open("w") as log:
            run = subprocess.run(
                [_tool("flwr"), "run", str(directory / "app"), CONNECTION, "--stream"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=directory,
                timeout=request["timeout"],
            )
        summary["run_returncode"] = run.returncode
    finally:
        for process in reversed(started):
            stop_tree(process.pid)
        summary["seconds"] = time.perf_counter() - start
        (directory / "served.json").write_text(json.dumps(summary))
    return summary


def network_isolation() -> list[str] | None:
    """The command prefix that runs a process in a new network namespace holding only loopback, or
    None.

    ``unshare --user --map-root-user --net`` needs unprivileged user namespaces (or root); where
    the kernel refuses them the deployment runs on the host's loopback instead, and says so.
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    prefix = [unshare, "--user", "--map-root-user", "--net"]
    if subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        return None
    return prefix


@dataclass
class Launch:
    """What :func:`launch` observed of a deployment: time, memory, processes and every socket's two
    ends."""

    seconds: float
    peak_memory_bytes: int
    isolated: bool
    served: dict
    processes_seen: int
    sockets: set = field(default_factory=set)
    left_running: list = field(default_factory=list)

    @property
    def addresses(self) -> set:
        """Every IP address the deployment's sockets were bound or connected to (the null address
        left out)."""
        return {
            ip
            for local, remote in self.sockets
            for ip, port in (local, remote)
            if not _null(ip, port)
        }

    @property
    def foreign_addresses(self) -> list:
        """``"local -> remote"`` of each socket that reached, or listened, beyond loopback.

        A socket is foreign when its local end is bound to anything but loopback (a listener on
        0.0.0.0 included: it would accept connections from the network), or its remote end is
        anything but loopback; a listener's remote end, the null address, is not a remote.
        """
        return sorted(
            f"{_endpoint(*local)} -> {_endpoint(*remote)}"
            for local, remote in self.sockets
            if not (_loopback(local[0]) or _null(*local))
            or not (_loopback(remote[0]) or _null(*remote))
        )


def _loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1" or address.startswith("::ffff:127.")


def _null(address: str, port: int) -> bool:
    """The unspecified address with port 0: no remote end (a listener), or a socket not yet
    bound."""
    return address in ("0.0.0.0", "::") and port == 0


def _endpoint(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _hex_address(text: str) -> str:
    raw = bytes.fromhex(text)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(
        raw[i : i + 4][::-1] for i in range(0, 16, 4)
    )  # four little-endian 32-bit words
    return socket.inet_ntop(socket.AF_INET6, words)


def _hex_endpoint(text: str) -> tuple[str, int]:
    address, port = text.split(":")
    return _hex_address(address), int(port, 16)


def _socket_tables(pid: int) -> dict:
    """``{inode: ((local ip, port), (remote ip, port))}`` of every TCP and UDP socket in the
    network namespace of process ``pid`` (read from ``/proc/PID/net/*``)."""
    table = {}
    for name in ("tcp", "tcp6", "udp", "udp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 9:
                    table[fields[9]] = (_hex_endpoint(fields[1]), _hex_endpoint(fields[2]))
    return table


def socket_endpoints(pid: int, tables: dict | None = None) -> set:
    """``((local ip, port), (remote ip, port))`` of the process's TCP and UDP sockets, in its own
    network namespace.

    psutil reads the caller's ``/proc/net``, blind to a namespace the process was moved into; this
    reads ``/proc/PID/net/*`` and keeps the sockets whose inodes the process holds. ``tables``, a
    cache keyed by network namespace, lets the processes of one namespace share one read of its
    socket tables: the kernel writes out the whole table on every read (about 3 ms each), which
    read once per process made watching a deployment cost a quarter of a core.
    """
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    if not inodes:
        return set()
    tables = {} if tables is None else tables
    try:
        namespace = os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        namespace = f"process {pid}"
    if namespace not in tables:
        tables[namespace] = _socket_tables(pid)
    return {tables[namespace][inode] for inode in inodes if inode in tables[namespace]}


def _observe(root, seen: dict, sockets: set) -> int:
    """Add the tree's processes and sockets to ``seen`` / ``sockets``; its total resident memory."""
    try:
        tree = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    memory, tables = 0, {}  # one read of each namespace's socket tables per look
    for process in tree:
        with contextlib.suppress(psutil.Error):
            seen.setdefault(process.pid, process.create_time())
            memory += process.memory_info().rss
            sockets.update(socket_endpoints(process.pid, tables))
    return memory


def launch(
    directory: str | Path,
    clients: int,
    port: int | None = None,
    timeout: float = 600.0,
    isolate: bool = True,
) -> Launch:
    """Run :func:`serve` in its own process (and network namespace), watch it, and leave nothing
    running."""
    directory = Path(directory)
    if port is not None:
        check_port_free(port)
    prefix = network_isolation() if isolate else None
    (directory / "request.json").write_text(
        json.dumps(
            {
                "clients": clients,
                "port": port,
                "timeout": timeout,
                "loopback_up": prefix is not None,
            }
        )
    )
    command = [*(prefix or []), sys.executable, "-c", SERVE, str(directory)]
    seen, sockets, peak = {}, set(), 0
    start = time.perf_counter()
    child = subprocess.Popen(
        command,
        stdout=(directory / "serve.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    root = psutil.Process(child.pid)
    try:
        while child.poll() is None:
            if time.perf_counter() - start > timeout + 60:
                raise TimeoutError(
                    f"the Flower deployment ran past {timeout + 60:.0f} s; logs under "
                    f"{directory / 'logs'}"
                )
            peak = max(peak, _observe(root, seen, sockets))
            time.sleep(0.2)
    finally:
        stop_tree(child.pid)
        for (
            pid
        ) in seen:  # the serve process is gone: stop any orphan of its tree (a new session each)
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).create_time() == seen[pid]:
                    stop_tree(pid)
    left = [pid for pid, created in seen.items() if _alive(pid, created)]
    served_path = directory / "served.json"
    served = json.loads(served_path.read_text()) if served_path.exists() else {}
    if child.returncode != 0 or served.get("run_returncode") != 0:
        raise RuntimeError(
            f"the Flower deployment failed (exit {child.returncode}, flwr run "
            f"{served.get('run_returncode')}):\n{_tail(directory / 'serve.log')}\n--- flwr run:\n"
            f"{_tail(directory / 'logs' / 'run.log')}"
        )
    return Launch(
        time.perf_counter() - start, peak, prefix is not None, served, len(seen), sockets, left
    )


def _alive(pid: int, created: float) -> bool:
    try:
        process = psutil.Process(pid)
        return process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
