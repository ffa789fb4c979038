"""A throwaway Redis Cluster for the tests: three masters started from the ``redis-server`` binary.

The servers run in the foreground as child processes of the test run (so they are stopped by
their process ids, never by name), in a temporary directory, on free ports, without persistence.
`redis-cli --cluster create` assigns the 16384 slots; the cluster is usable once every node
reports ``cluster_state:ok``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import redis

__all__ = ["ClusterStartError", "LocalCluster", "find_binaries", "start_cluster"]

# A cluster node also listens on its port + 10000 (the cluster bus), so both must be free.
_BUS_OFFSET = 10_000


class ClusterStartError(RuntimeError):
    """The cluster could not be started; the message carries the servers' log tails."""


@dataclass(kw_only=True)
class LocalCluster:
    """Running cluster nodes; `stop` ends exactly the processes `start_cluster` started."""

    ports: list[int]
    directory: Path
    server: str
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """A ``redis+cluster://`` store URL listing every node as a seed."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports) + "/0"

    def logs(self) -> str:
        """The last lines of every node's log (for error messages)."""
        tails = []
        for port in self.ports:
            for name in ("console.log", "redis.log"):
                log = self.directory / str(port) / name
                text = log.read_text(errors="replace") if log.exists() else "(none)"
                tails.append(f"--- node {port} {name} ---\n" + "\n".join(text.splitlines()[-15:]))
        return "\n".join(tails)

    def start_node(self, port: int) -> None:
        """Start (or restart, after `kill_node`) the node on ``port``; it rejoins with its nodes.conf."""
        node_dir = self.directory / str(port)
        node_dir.mkdir(parents=True, exist_ok=True)
        command = [
            self.server,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(node_dir),
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", "2000",
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--logfile", "redis.log",
        ]  # fmt: skip
        # Errors before the log file opens (a bad option) go to the console file.
        with (node_dir / "console.log").open("ab") as console:
            self.processes[port] = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT
            )

    def kill_node(self, port: int) -> None:
        """SIGKILL the node on ``port`` (a crash: it loses its data, there is no persistence)."""
        process = self.processes.pop(port)
        process.kill()
        process.wait(timeout=10)

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Wait until every node reports ``cluster_state:ok`` with all slots served."""
        deadline = time.monotonic() + timeout
        for port in self.ports:
            _wait(f"node {port} to report cluster_state:ok", lambda port=port: _node_ok(port), deadline, self)

    def stop(self) -> None:
        """Stop the nodes (SIGTERM, then SIGKILL for one that does not exit in 10 s)."""
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self.processes.clear()


def find_binaries() -> tuple[str, str] | None:
    """Paths of ``redis-server`` and ``redis-cli``, or None when either is not installed."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        return None
    return server, cli


def _free_ports(count: int) -> list[int]:
    """``count`` ports that are free, and whose cluster-bus ports are free too (best effort)."""
    ports: list[int] = []
    with ExitStack() as held:
        while len(ports) < count:
            probe = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
            if port + _BUS_OFFSET > 65_535:
                continue
            bus = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                bus.bind(("127.0.0.1", port + _BUS_OFFSET))
            except OSError:
                continue
            ports.append(port)
    return ports


def _wait(condition: str, check: Callable[[], bool], deadline: float, cluster: LocalCluster) -> None:
    while True:
        if any(process.poll() is not None for process in cluster.processes.values()):
            raise ClusterStartError(f"a Redis Cluster node exited while waiting for {condition}:\n{cluster.logs()}")
        try:
            if check():
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise ClusterStartError(f"timed out waiting for {condition}:\n{cluster.logs()}")
        time.sleep(0.05)


def _node_ok(port: int) -> bool:
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1, socket_timeout=2)
    try:
        info = client.execute_command("CLUSTER", "INFO")
    finally:
        client.close()
    text = info.decode() if isinstance(info, bytes) else str(info)
    fields = dict(line.split(":", 1) for line in text.split() if ":" in line)
    return fields.get("cluster_state") == "ok" and fields.get("cluster_slots_ok") == "16384"


def _pings(port: int) -> bool:
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1, socket_timeout=2)
    try:
        return bool(client.ping())
    finally:
        client.close()


def _start_once(server: str, cli: str, directory: Path, masters: int, timeout: float) -> LocalCluster:
    cluster = LocalCluster(ports=_free_ports(masters), directory=directory, server=server)
    deadline = time.monotonic() + timeout
    try:
        for port in cluster.ports:
            cluster.start_node(port)
        for port in cluster.ports:
            _wait(f"node {port} to answer PING", lambda port=port: _pings(port), deadline, cluster)
        create = subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{port}" for port in cluster.ports)]
            + ["--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=max(1.0, deadline - time.monotonic()),
            check=False,
        )
        if create.returncode != 0:
            raise ClusterStartError(
                f"`redis-cli --cluster create` failed ({create.returncode}):\n{create.stdout}\n{create.stderr}\n"
                f"{cluster.logs()}"
            )
        cluster.wait_ok(max(1.0, deadline - time.monotonic()))
    except BaseException:
        cluster.stop()
        raise
    return cluster


def start_cluster(directory: Path, *, masters: int = 3, timeout: float = 60.0, attempts: int = 3) -> LocalCluster:
    """Start a Redis Cluster of ``masters`` nodes with their files under ``directory``.

    A port can be taken between choosing it and the server binding it, so a failed start is
    retried on new ports.

    Raises:
        FileNotFoundError: ``redis-server`` or ``redis-cli`` is not installed.
        ClusterStartError: the cluster did not come up (the message has the nodes' logs).
    """
    binaries = find_binaries()
    if binaries is None:
        raise FileNotFoundError("redis-server and redis-cli must both be on PATH to start a Redis Cluster")
    server, cli = binaries
    for attempt in range(1, attempts + 1):
        try:
            return _start_once(server, cli, directory / f"attempt-{attempt}", masters, timeout)
        except (ClusterStartError, subprocess.TimeoutExpired):
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")
