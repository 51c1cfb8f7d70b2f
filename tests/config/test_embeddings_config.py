"""``memory.embeddings``: off by default; on, one endpoint (a provider by name, or a URL of
its own), and every mistake named by its key path without showing a key."""

from __future__ import annotations

import re

import pytest

from tether.config import load_text
from tether.errors import ConfigError

LLM = """
llm:
  providers: {fake: {base_url: "http://127.0.0.1:9/v1", api_key: sk-provider-0123456789}}
  models: {main: {provider: fake, model: chat}}
"""


def test_semantic_recall_is_off_by_default() -> None:
    assert load_text("").memory.embeddings is None


def test_a_provider_by_name_or_an_endpoint_of_its_own() -> None:
    on = load_text(LLM + "memory:\n  embeddings: {provider: fake, model: embed-small}\n")
    assert on.memory.embeddings is not None and on.memory.embeddings.provider == "fake"
    local = load_text(
        "memory:\n  embeddings: {base_url: 'http://127.0.0.1:11434/v1', model: nomic-embed-text}"
    )
    assert local.memory.embeddings is not None and local.memory.embeddings.batch == 64


@pytest.mark.parametrize(
    ("yaml", "says"),
    [
        (
            "memory:\n  embeddings: {provider: nope, model: m}\n",
            r"memory: .*embeddings\.provider: no provider 'nope' \(no llm\.providers\)",
        ),
        (
            LLM + "memory:\n  embeddings: {provider: other, model: m}\n",
            r"embeddings\.provider: no provider 'other' \(llm\.providers has fake\)",
        ),
        ("memory:\n  embeddings: {model: m}\n", r"memory\.embeddings: .*one of them"),
        (
            LLM + "memory:\n  embeddings: {provider: fake, model: m, api_key: sk-own-0123456789}\n",
            r"memory\.embeddings: .*api_key goes with base_url",
        ),
        ("memory:\n  embeddings: {base_url: 'http://x/v1'}\n", r"memory\.embeddings\.model"),
        (
            "memory:\n  embeddings: {base_url: 'http://x/v1', model: m, batch: 0}\n",
            r"memory\.embeddings\.batch",
        ),
    ],
)
def test_a_mistake_names_its_key_and_shows_no_key(yaml: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_text(yaml)
    message = str(caught.value)
    assert re.search(says, message), message
    assert "0123456789" not in message
