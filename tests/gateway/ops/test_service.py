"""Running as a service: systemd's notify protocol and watchdog on a real ``tether run``,
and the deploy files (unit, Dockerfile, compose) checked so they cannot rot silently.

The fake systemd is a datagram socket the test binds and passes as ``NOTIFY_SOCKET``;
the gateway is driven through the fake Telegram Bot API. A handler that sleeps on the
event loop's thread marks its start and end on the same socket, from the same process, so
the order of datagrams alone shows which pings fell inside the block: no timing asserted.
"""

from __future__ import annotations

import asyncio
import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
import yaml

from tests.fakes.cluster import free_port
from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import ROOT, write_config
from tests.support.processes import TETHER, spawn_run, subprocess_env
from tether.config import load_text
from tether.gateway.ops.systemd import Notifier

DEPLOY = ROOT / "deploy"


class FakeSystemd:
    """The receiving end of ``NOTIFY_SOCKET``: every datagram, in arrival order."""

    def __init__(self, address: str | bytes) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.setblocking(False)
        self.messages: list[str] = []
        self._changed = asyncio.Condition()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            data = await loop.sock_recv(self.sock, 4096)
            async with self._changed:
                self.messages.append(data.decode())
                self._changed.notify_all()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout)

    def index(self, message: str, start: int = 0) -> int:
        return self.messages.index(message, start)

    async def close(self) -> None:
        self._reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self._reader
        self.sock.close()


@pytest.mark.slow
async def test_run_says_ready_pings_from_the_loop_and_says_stopping(tmp_path: Path) -> None:
    fake = await FakeTelegram().start()
    try:
        await _run_under_fake_systemd(tmp_path, fake)
    finally:
        await fake.stop()


async def _run_under_fake_systemd(tmp_path: Path, fake: FakeTelegram) -> None:
    port = free_port()
    telegram = dict(token=fake.token, base_url=fake.base_url, poll_timeout=1, rate_limits=False)
    config = write_config(
        tmp_path,
        plugins=["tests.plugins.service_block:router"],
        http={"enabled": True, "port": port},
        platforms={"telegram": telegram},
    )
    address = str(tmp_path / "notify")
    systemd = FakeSystemd(address)
    env = subprocess_env(
        NOTIFY_SOCKET=address,
        WATCHDOG_USEC="100000",  # a ping every 50 ms: a 1 s block misses about 20
        TETHER_TEST_NOTIFY=address,
        TETHER_TEST_BLOCK_S="1",
    )
    proc = await spawn_run(config, tmp_path / "tether.log", env)
    try:
        await systemd.wait_for(lambda: any("READY=1" in m for m in systemd.messages))
        ready = next(m for m in systemd.messages if "READY=1" in m)
        assert ready.splitlines() == ["READY=1", "STATUS=serving telegram"]
        assert systemd.messages[0] == "STATUS=starting"
        # READY comes after start: HTTP already answers, recovery has run.
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/healthz") as answer,
        ):
            assert answer.status == 200
        at_ready = systemd.messages.index(ready)
        await systemd.wait_for(lambda: systemd.messages[at_ready:].count("WATCHDOG=1") >= 3)

        fake.push(message=fake.message(11, "block"))
        await systemd.wait_for(lambda: "X_TEST=unblocked" in systemd.messages)
        blocked = systemd.index("X_TEST=blocked")
        unblocked = systemd.index("X_TEST=unblocked", blocked)
        # While the loop was wedged, no ping: systemd would have restarted the process.
        assert "WATCHDOG=1" not in systemd.messages[blocked:unblocked]
        # And once it turns again, the pings resume.
        await systemd.wait_for(lambda: "WATCHDOG=1" in systemd.messages[unblocked:])
        await fake.wait_for(lambda: [s["text"] for s in fake.sent] == ["unblocked"], 30)

        # A reload (SIGHUP) speaks systemd's notify-reload: RELOADING=1 with the monotonic
        # time, then READY=1 once the reload has ended (here: nothing changed).
        at_reload = len(systemd.messages)
        proc.send_signal(signal.SIGHUP)
        await systemd.wait_for(
            lambda: any(m.startswith("READY=1") for m in systemd.messages[at_reload:])
        )
        reloading = [m for m in systemd.messages[at_reload:] if m.startswith("RELOADING=1")]
        assert len(reloading) == 1 and "\nMONOTONIC_USEC=" in reloading[0]
        again = next(m for m in systemd.messages[at_reload:] if m.startswith("READY=1"))
        assert systemd.messages.index(again, at_reload) > systemd.messages.index(reloading[0])
        assert again.splitlines() == ["READY=1", "STATUS=serving telegram"]

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await systemd.close()
    stopping = [m for m in systemd.messages if m.startswith("STOPPING=1")]
    assert len(stopping) == 1
    assert systemd.messages.index(stopping[0]) > at_ready


async def test_abstract_socket_address_and_statuses() -> None:
    name = f"@tether-test-{uuid.uuid4().hex}"
    systemd = FakeSystemd(b"\0" + name[1:].encode())
    env = {"NOTIFY_SOCKET": name, "WATCHDOG_USEC": "20000", "WATCHDOG_PID": str(os.getpid())}
    try:
        async with Notifier.from_env(env) as notifier:
            assert env == {}  # taken out: children do not talk to systemd in our name
            assert notifier.watchdog_interval == 0.01
            notifier.status("warming up")
            notifier.ready("serving console")
            await systemd.wait_for(lambda: systemd.messages.count("WATCHDOG=1") >= 2)
            notifier.stopping()
        await systemd.wait_for(lambda: any("STOPPING=1" in m for m in systemd.messages))
    finally:
        await systemd.close()
    assert "STATUS=warming up" in systemd.messages
    assert "READY=1\nSTATUS=serving console" in systemd.messages
    assert systemd.messages[-1] == "STOPPING=1\nSTATUS=stopping: finishing in-flight work"


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"WATCHDOG_USEC": "100000"},  # a watchdog without a socket to ping
        {"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "100000", "WATCHDOG_PID": "1"},  # not us
        {"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "soon"},
        {"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "0"},
    ],
)
async def test_no_watchdog_unless_systemd_asks_this_process(env: dict[str, str]) -> None:
    notifier = Notifier.from_env(dict(env))
    assert notifier.watchdog_interval is None
    assert notifier.enabled == ("NOTIFY_SOCKET" in env)


async def test_an_unreachable_socket_is_logged_not_raised(tmp_path: Path) -> None:
    address = tmp_path / "late"
    env = {"NOTIFY_SOCKET": str(address), "WATCHDOG_USEC": "20000"}
    with structlog.testing.capture_logs() as logs:
        async with Notifier.from_env(env) as notifier:
            assert not notifier.send("READY=1")
            assert not notifier.send("STATUS=still fine")
            systemd = FakeSystemd(str(address))  # the listener comes (back)
            try:
                assert notifier.send("STATUS=fine again")
                await systemd.wait_for(lambda: "STATUS=fine again" in systemd.messages)
            finally:
                await systemd.close()
    # One warning per failing spell, not one per ping; one line when it passes again.
    names = [entry["event"] for entry in logs]
    assert names.count("systemd.notify_failed") == 1
    assert names.count("systemd.notify_recovered") == 1


# -- the deploy files ---------------------------------------------------------------------


def unit_settings(path: Path) -> dict[str, dict[str, list[str]]]:
    """A systemd unit as {section: {key: [values]}} (keys may repeat, so no configparser)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not a unit line: {raw!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def test_the_unit_file_is_notify_with_a_watchdog_restart_and_hardening() -> None:
    unit = unit_settings(DEPLOY / "tether.service")
    service = unit["Service"]
    assert service["Type"] == ["notify"]
    assert service["NotifyAccess"] == ["main"]
    assert service["WatchdogSec"][0].rstrip("s").isdigit()
    assert service["Restart"] == ["on-failure"]
    assert service["ExecStart"][0].split()[1:3] == ["run", "-c"]
    assert service["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert service["User"] == ["tether"]
    for hardening in ("NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp"):
        assert service[hardening][0] in {"yes", "strict"}, hardening
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined."""
    text = path.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), " ".join(rest.split())))
    return out


def test_the_dockerfile_is_slim_non_root_with_a_healthcheck_on_healthz() -> None:
    steps = dockerfile_instructions(DEPLOY / "Dockerfile")
    final = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM") :]
    assert "slim" in final[0][1]
    (user,) = [args for word, args in final if word == "USER"]
    assert user not in {"root", "0"} and not user.startswith("0:")
    (health,) = [args for word, args in final if word == "HEALTHCHECK"]
    assert "/healthz" in health and "curl" not in health
    probe = health.partition("CMD ")[2]
    assert probe.startswith('["python", "-c",')
    assert [args for word, args in final if word == "VOLUME"] == ['["/data"]']
    # Everything the wheel needs is copied; the package folders match the tree.
    copied = {args.split()[0] for word, args in steps if word == "COPY" and "--from" not in args}
    assert {"tether", "gateway", "adapters", "memory", "scheduler", "config"} <= copied
    for source in copied:
        assert (ROOT / source).exists(), source


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # the name http.server calls
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.mark.slow
def test_the_healthcheck_one_liner_runs() -> None:
    """The HEALTHCHECK's command, run here against a server answering /healthz: exit 0
    on 200, 1 on 503 or when nothing answers (a typo would fail every container)."""
    steps = dockerfile_instructions(DEPLOY / "Dockerfile")
    (health,) = [args for word, args in steps if word == "HEALTHCHECK"]
    argv = yaml.safe_load(health.partition("CMD ")[2])
    assert argv[:2] == ["python", "-c"]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)  # listening now
    code = argv[2].replace(":8080/", f":{server.server_address[1]}/")

    def probe() -> int:
        return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode

    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert probe() == 0
        _Health.status = 503
        assert probe() == 1
    finally:
        _Health.status = 200
        server.shutdown()
        server.server_close()
        thread.join()
    assert probe() == 1


def test_systemd_analyze_accepts_the_unit(tmp_path: Path) -> None:
    """Where systemd's own checker exists: the unit verifies, and its exposure score
    stays at or below 1.9 ("OK"), so a loosened sandbox is noticed."""
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        pytest.skip("no systemd-analyze here")
    unit = tmp_path / "tether.service"
    text = (DEPLOY / "tether.service").read_text()
    unit.write_text(text.replace("/opt/tether/bin/tether", TETHER))  # an ExecStart that exists
    verify = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
    assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr
    security = subprocess.run(
        [analyze, "security", "--offline=true", "--threshold=19", str(unit)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert security.returncode == 0, security.stdout[-3000:]


def test_the_compose_file_runs_tether_on_its_postgres() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    db, gateway = services["postgres"], services["tether"]
    assert db["image"].startswith("postgres:")
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert any(v.startswith("postgres:") for v in db["volumes"])
    assert gateway["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert gateway["build"]["dockerfile"] == "deploy/Dockerfile"
    assert (DEPLOY / gateway["build"]["context"] / gateway["build"]["dockerfile"]).exists()
    mounted = {v.split(":")[1]: v.split(":")[0] for v in gateway["volumes"]}
    config = (DEPLOY / mounted["/etc/tether/tether.yaml"]).read_text()
    assert set(compose["volumes"]) == {"postgres", "data"}
    assert all(port.startswith("127.0.0.1:") for port in gateway["ports"])
    # The gateway's store is that PostgreSQL, its password from the shared secret file.
    secret = Path("/run/secrets/postgres_password")
    assert "postgres_password" in db["secrets"] and "postgres_password" in gateway["secrets"]
    settings = load_text(config.replace(f"${{file:{secret}}}", "pw"))
    assert settings.memory.store == "postgresql://tether:pw@postgres:5432/tether"
    assert f"${{file:{secret}}}" in config
    assert settings.http.enabled and settings.http.port == 8080
    assert not settings.platforms.console.enabled


def test_the_image_config_loads_with_sqlite_on_the_volume(monkeypatch: Any) -> None:
    monkeypatch.delenv("TETHER_STORE", raising=False)
    settings = load_text((DEPLOY / "tether.yaml").read_text())
    assert settings.memory.store == "sqlite:////data/tether.db"
    assert settings.http.enabled and settings.http.port == 8080
    assert not settings.platforms.console.enabled


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=300)


def test_docker_compose_config_validates(tmp_path: Path) -> None:
    if not shutil.which("docker") or _docker("compose", "version").returncode != 0:
        pytest.skip("no docker compose here")
    project = tmp_path / "deploy"
    shutil.copytree(DEPLOY, project)
    (project / "secrets").mkdir(exist_ok=True)
    (project / "secrets" / "postgres_password").write_text("pw\n")
    result = _docker("compose", "-f", str(project / "compose.yaml"), "config", "--quiet")
    assert result.returncode == 0, result.stderr


def test_the_image_builds() -> None:
    """Opt-in (TETHER_TEST_DOCKER=1): it pulls a base image and installs from PyPI."""
    if os.environ.get("TETHER_TEST_DOCKER") != "1" or not shutil.which("docker"):
        pytest.skip("set TETHER_TEST_DOCKER=1 where Docker can build images")
    result = _docker("build", "-f", str(DEPLOY / "Dockerfile"), "-t", "tether:test", str(ROOT))
    assert result.returncode == 0, result.stderr[-2000:]
