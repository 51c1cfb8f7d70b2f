"""``memory.documents``: files cut into chunks and indexed by the FTS5 trigram engine,
read again only when they changed, searched with the history's ranking.

The PDFs are written by tests/support/pdf.py and read by the real ``pypdf``.
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog
from hypothesis import given
from hypothesis import strategies as st

from tests.support.config import events_named
from tests.support.pdf import pdf
from tether.memory.documents import DocumentIndex
from tether.memory.documents.chunks import SIZE, chunks


def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "handbook"
    (docs / "policies").mkdir(parents=True)
    (docs / "welcome.md").write_text(
        "# Welcome\n\nThe office opens at eight.\n\n## Parking\n\n"
        "Staff park on level minus two; visitors at the front gate.\n"
    )
    (docs / "policies" / "leave.txt").write_text("Annual leave is 25 days, booked in the portal.")
    (docs / "policies" / "refunds.pdf").write_bytes(
        pdf(
            ["Refunds are paid within 14 days", "of the returned parcel arriving."],
            ["Page two: exchanges need the original receipt."],
        )
    )
    (docs / "policies" / "退款.md").write_text("# 退款\n\n客户退款需要提供原始收据。\n")
    (docs / "logo.png").write_bytes(b"\x89PNG not a document")
    return docs


def test_a_folder_of_markdown_text_and_pdf_is_indexed_and_found(tmp_path: Path) -> None:
    docs = folder(tmp_path)
    index = DocumentIndex([str(docs)])
    assert index.refresh() == {"indexed": 4, "kept": 0, "removed": 0, "skipped": 0}
    names = sorted(Path(n).name for n in index.names)
    assert names == ["leave.txt", "refunds.pdf", "welcome.md", "退款.md"]
    (refund,) = index.search("refunds paid days", 1)
    assert "within 14 days" in refund.text and refund.conversation.endswith("refunds.pdf")
    assert refund.role == "document" and refund.id < 0
    (parking,) = index.search("where do visitors park", 1)
    assert parking.text.startswith("Welcome > Parking\n") and "front gate" in parking.text
    (chinese,) = index.search("退款", 1)  # two characters: a substring scan
    assert "原始收据" in chinese.text
    (page_two,) = index.search("exchanges original receipt", 1)
    assert page_two.conversation.endswith("refunds.pdf")  # every page of a PDF is read
    assert index.search("zeppelin") == []


def test_only_changed_files_are_read_again_and_removed_ones_leave(tmp_path: Path) -> None:
    docs = folder(tmp_path)
    index = DocumentIndex([f"{docs}/**/*.md", f"{docs}/**/*.txt"])
    assert index.refresh()["indexed"] == 3
    assert index.refresh() == {"indexed": 0, "kept": 3, "removed": 0, "skipped": 0}
    leave = docs / "policies" / "leave.txt"
    leave.write_text("Annual leave is 30 days from next year.")
    os.utime(leave, ns=(1, 1))  # a different mtime whatever the clock's resolution
    assert index.refresh() == {"indexed": 1, "kept": 2, "removed": 0, "skipped": 0}
    assert "30 days" in index.search("annual leave", 1)[0].text
    assert not [h for h in index.search("annual leave 25") if "25 days" in h.text]
    (docs / "welcome.md").unlink()
    assert index.refresh()["removed"] == 1
    assert index.search("parking") == []


def test_an_unreadable_pdf_is_skipped_with_its_reason_and_the_rest_indexed(
    tmp_path: Path,
) -> None:
    docs = folder(tmp_path)
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is not a pdf at all")
    index = DocumentIndex([str(docs)])
    with structlog.testing.capture_logs() as logs:
        counts = index.refresh()
    assert counts["indexed"] == 4 and counts["skipped"] == 1
    (skipped,) = events_named(logs, "documents.unreadable")
    assert skipped["file"].endswith("broken.pdf") and "not a readable PDF" in skipped["reason"]


def test_a_pattern_that_names_nothing_indexes_nothing(tmp_path: Path) -> None:
    index = DocumentIndex([str(tmp_path / "missing" / "*.md")])
    assert index.refresh() == {"indexed": 0, "kept": 0, "removed": 0, "skipped": 0}
    assert index.search("anything") == []


paragraphs = st.lists(
    st.one_of(
        st.text(min_size=0, max_size=3000),
        st.from_regex(r"#{1,6} [A-Za-z ]{1,20}", fullmatch=True),
    ),
    max_size=12,
)


@given(paragraphs)
def test_any_text_becomes_chunks_within_the_size_keeping_every_word(parts: list[str]) -> None:
    text = "\n\n".join(parts)
    out = chunks(text)
    for chunk in out:
        heading, _, _body = chunk.partition("\n") if "\n" in chunk else ("", "", chunk)
        assert len(chunk) <= SIZE + len(heading) + 1
    words = {w for p in parts if not p.lstrip().startswith("#") for w in p.split()}
    joined = " ".join(out)
    assert all(w in joined for w in words)
