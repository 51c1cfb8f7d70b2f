"""On PostgreSQL: ``tether status`` shows the schema version, and the ``pg_dump`` command
``tether backup`` prints, run as printed, makes an archive ``tether backup --check``
accepts (the documented way works, search_path schema and all)."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.support.config import write_config
from tether.gateway.cli import main
from tether.memory.postgres.schema import MIGRATIONS

pytestmark = pytest.mark.postgres


def test_the_printed_pg_dump_makes_an_archive_the_check_accepts(
    tmp_path: Path, pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, memory={"store": pg_dsn})
    assert main(["status", "--json", "-c", str(config)]) == 0  # opens, so migrates
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == {"version": len(MIGRATIONS), "newest": len(MIGRATIONS)}

    archive = tmp_path / "tether.dump"
    assert main(["backup", str(archive), "-c", str(config)]) == 1  # printed, not run
    (command,) = [
        line for line in capsys.readouterr().err.splitlines() if line.startswith("  pg_dump ")
    ]
    subprocess.run(shlex.split(command), check=True)  # trust auth: no password to give

    assert main(["backup", "--check", str(archive), "-c", str(config)]) == 0
    said = capsys.readouterr().out
    assert "a pg_dump archive" in said and "holds Tether's tables" in said
    junk = tmp_path / "junk.dump"
    junk.write_bytes(b"PGDMP" + b"\0" * 64)
    assert main(["backup", "--check", str(junk), "-c", str(config)]) == 1
