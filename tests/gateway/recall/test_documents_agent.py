"""``memory.documents`` through the pipeline: a folder of Markdown and a PDF is indexed
at the start, the model finds the answer in it with ``search_memory`` (beside the
history), and a reload re-reads the file that changed.

The real ``openai`` client against the fake model, which calls the tool when told
``search: WORDS`` and answers with what the tool returned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.support.config import config_dict, merge
from tests.support.gateway import running
from tests.support.pdf import pdf
from tether.config import load
from tether.testing.model import Body, FakeModel, asks_for, tool_call


def reading(body: Body) -> Any:
    messages = body.get("messages", [])
    if messages and messages[-1].get("role") == "tool":
        return "From the documents: " + str(messages[-1].get("content", ""))
    users = [m for m in messages if m.get("role") == "user"]
    text = str(users[-1].get("content") or "") if users else ""
    if text.startswith("search: "):
        return asks_for(tool_call("search_memory", {"query": text.removeprefix("search: ")}))
    return "Noted."


def write(tmp_path: Path, model: FakeModel, documents: list[str]) -> Path:
    config = tmp_path / "tether.yaml"
    sections = config_dict(
        tmp_path,
        llm=model.section(timeout=5),
        agent={"handler": "llm"},
        memory={"documents": documents},
    )
    config.write_text(yaml.safe_dump(merge(sections, {})))
    return config


async def test_the_agent_answers_from_a_folder_of_markdown_and_a_pdf(
    tmp_path: Path, model: FakeModel
) -> None:
    docs = tmp_path / "handbook"
    docs.mkdir()
    (docs / "office.md").write_text(
        "# Office\n\n## Wifi\n\nThe guest wifi password is on the fridge.\n"
    )
    (docs / "returns.pdf").write_bytes(
        pdf(["Returns are accepted within 45 days", "with a receipt."])
    )
    model.reply = reading
    config = write(tmp_path, model, [str(docs)])
    async with running(load(config), config_path=str(config)) as (gateway, loop):
        await loop.say("search: returns accepted days")
        [answer] = await loop.wait_for_sent(1)
        await loop.say("search: guest wifi")
        sent = await loop.wait_for_sent(2)

        (docs / "returns.pdf").write_bytes(pdf(["Returns are accepted within 60 days now."]))
        assert await gateway.reloader.reload()
        await loop.say("search: returns accepted days")
        after = await loop.wait_for_sent(3)
    assert "within 45 days" in answer.message.text
    assert "returns.pdf]" in answer.message.text  # where it came from
    assert "Office > Wifi" in sent[1].message.text and "fridge" in sent[1].message.text
    # the document as it is now; the old answer is still history (and found as such)
    from_documents = [
        line for line in after[2].message.text.splitlines() if line.startswith("[document:")
    ]
    assert len(from_documents) == 1 and "60 days now" in from_documents[0]
    offered = model.requests[0].tools
    assert "search_memory" in offered


async def test_without_documents_the_tool_searches_the_history_only(
    tmp_path: Path, model: FakeModel
) -> None:
    model.reply = reading
    config = write(tmp_path, model, [])
    async with running(load(config), config_path=str(config)) as (gateway, loop):
        assert gateway.pipeline.documents is None
        await loop.say("search: returns")
        [answer] = await loop.wait_for_sent(1)
    assert answer.message.text == "From the documents: nothing found for 'returns'"
