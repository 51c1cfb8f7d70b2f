"""Settings on a temporary store, as every test makes them, and reading that store as an
operator would (``sqlite3`` on the file)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.cluster import SECRET as CLUSTER_SECRET
from tests.fakes.discord_api import TOKEN as DISCORD_TOKEN
from tests.fakes.feishu_api import APP_SECRET as FEISHU_APP_SECRET
from tests.fakes.feishu_api import ENCRYPT_KEY as FEISHU_ENCRYPT_KEY
from tests.fakes.feishu_api import VERIFICATION_TOKEN as FEISHU_VERIFICATION_TOKEN
from tests.fakes.telegram_api import TOKEN as TELEGRAM_TOKEN
from tether.config import Settings, load_text
from tether.errors import ConfigError
from tether.events import Conversation, Event
from tether.testing.model import API_KEY as OPENAI_API_KEY

#: The repository (tests/support/config.py is two folders down).
ROOT = Path(__file__).resolve().parents[2]
#: The shared corpus of third-party payloads beside the repository (not copied into it).
CORPUS = ROOT.parent / "shared" / "corpus"


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def config_dict(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "memory": {"store": f"sqlite:///{tmp_path / 'tether.db'}"},
        "http": {"enabled": False},
        "platforms": {"console": {"enabled": False}},
        "pipeline": {"backoff_base": 0.01, "backoff_max": 0.05, "sweep_interval": 0.1},
        "outbox": {"backoff_base": 0.01, "backoff_max": 0.05},
        "logging": {"format": "json"},
        "access": {"allow": ["*"], "rate_limit": {"messages": 0}},
    }
    return merge(base, sections)


def make_settings(tmp_path: Path, **sections: Any) -> Settings:
    return load_text(yaml.safe_dump(config_dict(tmp_path, **sections)))


def write_config(tmp_path: Path, **sections: Any) -> Path:
    path = tmp_path / "tether.yaml"
    path.write_text(yaml.safe_dump(config_dict(tmp_path, **sections)))
    return path


def db_rows(tmp_path: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    """Query the test's SQLite store directly, as an operator would."""
    with sqlite3.connect(tmp_path / "tether.db") as db:
        return list(db.execute(sql, params))


def inbox_rows(tmp_path: Path) -> list[tuple[str, str]]:
    return db_rows(tmp_path, "SELECT key, status FROM inbox ORDER BY seq")


def events_named(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The captured structlog entries of one event name."""
    return [entry for entry in logs if entry["event"] == name]


def db(tmp_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(tmp_path / "tether.db")


CHAT = Conversation(platform="test", chat_id="c1")


def event(key: str, text: str = "hi") -> Event:
    return Event(key=key, platform="test", conversation=CHAT, text=text)


#: Secrets the tests configure; none may appear in any test's captured output.
SECRETS: set[str] = {
    TELEGRAM_TOKEN,
    TELEGRAM_TOKEN.split(":", 1)[1],
    "s3cret-webhook_token",  # tests/adapters/telegram/test_telegram.py's webhook secret
    FEISHU_APP_SECRET,
    FEISHU_ENCRYPT_KEY,
    FEISHU_VERIFICATION_TOKEN,
    DISCORD_TOKEN,
    OPENAI_API_KEY,
    CLUSTER_SECRET,
}


def parse(**sections: Any) -> Settings:
    """A config of these top-level sections on the in-memory store, no HTTP server."""
    base = {"memory": {"store": "memory://"}, "http": {"enabled": False}}
    return load_text(yaml.safe_dump({**base, **sections}))


def problem(**sections: Any) -> str:
    """The :class:`ConfigError` these sections make (the test fails if they load)."""
    with pytest.raises(ConfigError) as caught:
        parse(**sections)
    return str(caught.value)
