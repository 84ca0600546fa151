"""The README is the front page and docs/ holds the rest: every relative link of README.md
and docs/*.md reaches a file (and, for a `#anchor` into a Markdown page, one of its
headings, slugged as GitHub does), the README stays a front page, and its two commands for
a fresh machine are the scripts that exist, the test one being exactly what `.ci/run` runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def headings(text: str) -> set[str]:
    """GitHub's anchors of a page's headings (code blocks left out; repeats get -1, -2)."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", text).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_reaches_a_file_and_heading(page: Path) -> None:
    broken = []
    for url in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z]+:", url):
            continue  # https://, mailto:
        path, _, anchor = url.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{url}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in headings(target.read_text()):
            broken.append(f"{url}: no heading with that anchor in {target.name}")
    assert not broken, f"{page.relative_to(REPO)}: {broken}"


def test_every_doc_page_is_linked_from_the_readme() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    linked = {u.partition("#")[0] for u in LINK.findall(readme)}
    missing = [p.name for p in PAGES[1:] if f"docs/{p.name}" not in linked]
    assert not missing, f"docs pages the README's list does not link: {missing}"


def test_the_readme_is_a_front_page() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move material into docs/"


def test_the_readme_commands_for_a_fresh_machine_are_the_scripts_and_ci_runs_the_test_one() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```sh\n(.*?)^```", readme, re.S | re.M)
    commands = [ln.strip() for b in blocks for ln in b.splitlines() if ln.strip()]
    assert commands[:2] == ["./scripts/run", "./scripts/test"], commands
    for cmd in commands[:2]:
        assert (REPO / cmd).is_file(), cmd
    ci = [ln for ln in (REPO / ".ci" / "run").read_text().splitlines()
          if ln.strip() and not ln.lstrip().startswith("#")]  # fmt: skip
    assert ci[-1] == "exec ./scripts/test", ci
