"""Code, tests and docs explain themselves: nothing cites a tracker item by number or a
design document that is not in the repository (recorded run outputs under
benchmarks/results/ keep the words they were written with)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# spelt in pieces so that this file does not match itself
CITATION = re.compile(r"\b[Ii]ss" + r"ue ?[-#]?\d+|\b[Ii]ss" + r"ues #\d+|\bDES" + r"IGN\.md")
SCOPES = ("fastverify", "tests", "docs", "benchmarks", "scripts", "README.md")


def tracked_text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--", *SCOPES],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    paths = [REPO / p for p in out.split("\0") if p]
    return [p for p in paths if "benchmarks/results/" not in p.as_posix() and p.is_file()]


def test_the_check_finds_a_citation() -> None:
    assert CITATION.search("see is" + "sue 41") and CITATION.search("an is" + "sue-12 item")
    assert not CITATION.search("pki.issue('server')") and not CITATION.search("issued 12")
    assert not CITATION.search("a forward issues 2 x 61 + 1 all-reduces")


def test_nothing_cites_an_issue_number_or_an_outside_design_doc() -> None:
    found = []
    for path in tracked_text_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # a binary fixture
        for n, line in enumerate(text.splitlines(), 1):
            if CITATION.search(line):
                found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()[:120]}")
    assert found == [], "cite what the code does, not a tracker item:\n" + "\n".join(found)
