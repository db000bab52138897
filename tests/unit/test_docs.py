"""The repository documents itself: docs/ holds the contract, and no file points at a document a user
of the repository does not have (the team's shared folder, its design notes, the papers' seed files)."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"\.\./shared|(?<![\w/])(CONTRACT|DESIGN|REFERENCE)\.md|seed 00[0-4]|seeds/")


def test_docs_hold_the_contract_architecture_and_glossary():
    for name in ("contract.md", "architecture.md", "glossary.md", "papers.md"):
        assert (ROOT / "docs" / name).stat().st_size > 500, name


def test_no_file_refers_to_a_document_outside_the_repository():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    hits = []
    for f in files:
        path = ROOT / f
        if path.suffix in (".png", ".model", ".npz") or not path.is_file() or path == Path(__file__):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        hits += [f"{f}:{i}" for i, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert not hits, hits[:20]
