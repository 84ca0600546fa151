"""The README is the front page and docs/ holds the rest, in guides/, reference/ and
evidence/ with docs/README.md as their index and docs/architecture.md at the top: every
relative link of README.md and docs/**/*.md reaches a file (and, for a `#anchor` into a
Markdown page, one of its headings, slugged as GitHub does), every docs page is linked from
the index and the index from the README, the README stays a front page, and its two
commands for a fresh machine are the scripts that exist, the test one being exactly what
`.ci/run` runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
INDEX = DOCS / "README.md"
FOLDERS = ("guides", "reference", "evidence")
PAGES = [REPO / "README.md", *sorted(DOCS.glob("**/*.md"))]
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


def linked_files(page: Path) -> set[Path]:
    """The files a page's relative links reach (anchors dropped)."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    urls = [u.partition("#")[0] for u in LINK.findall(text) if not re.match(r"^[a-z]+:", u)]
    return {(page.parent / u).resolve() for u in urls if u}


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


def test_every_doc_page_is_linked_from_the_index_and_the_index_from_the_readme() -> None:
    readme = linked_files(REPO / "README.md")
    assert INDEX.resolve() in readme, "README.md does not link docs/README.md"
    reachable = readme | linked_files(INDEX)
    pages = [p for p in PAGES[1:] if p != INDEX]
    missing = [str(p.relative_to(REPO)) for p in pages if p.resolve() not in reachable]
    assert not missing, f"docs pages neither README.md nor docs/README.md links: {missing}"
    unindexed = [str(p.relative_to(REPO)) for p in pages if p.resolve() not in linked_files(INDEX)]
    assert not unindexed, f"docs pages the index (docs/README.md) does not list: {unindexed}"


def test_docs_keep_their_layout() -> None:
    """Guides, reference and evidence in their folders; only the index and the architecture
    at the top; every file under docs/ in one of them (or an image)."""
    top = sorted(p.name for p in DOCS.iterdir() if p.is_file())
    assert top == ["README.md", "architecture.md"], top
    dirs = sorted(p.name for p in DOCS.iterdir() if p.is_dir())
    assert dirs == sorted((*FOLDERS, "img")), dirs
    for folder in FOLDERS:
        assert any((DOCS / folder).glob("*.md")), f"docs/{folder}/ holds no page"


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


def test_the_readmes_first_screen_says_what_scripts_run_takes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before the tuning loop, the README names what `./scripts/run` takes on the machine
    (as root: the defaults the code has), how to choose others with fastverifyd's flags,
    that later commands need the same socket, the sim's sweep and tune times, and the
    weight cache's switch."""
    from fastverify import paths
    from fastverify.config import Config

    first = (REPO / "README.md").read_text(encoding="utf-8").split("## The tuning loop")[0]
    cfg = Config()
    monkeypatch.setattr(paths, "_is_root", lambda: True)
    for env in ("FASTVERIFY_SOCKET", "FASTVERIFY_STATE_DIR", "FASTVERIFY_PROFILE_DIRS"):
        monkeypatch.delenv(env, raising=False)
    taken = [
        f"port {cfg.server.port}",
        cfg.exporter.metrics_listen,
        f"`{paths.socket_path().parent}`",
        f"`{paths.state_dir()}`",
        f"`{paths.user_profile_dirs()[0]}`",
    ]
    for what in taken:
        assert what in first, what
    for flag in ("--server-port", "--metrics-listen", "--socket", "--state-dir"):
        assert flag in first, flag
    assert "FASTVERIFY_SOCKET" in first and "needs the same socket" in first
    assert re.search(r"`sweep`[^.]*about \d+ min", first) and "`tune" in first
    assert "--weight-cache auto" in first
