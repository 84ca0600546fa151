"""scripts/install-system-deps.sh installs only what is missing and changes nothing installed,
dependencies included. Run for real (`--simulate`: apt's own plan, `apt-get -s`) against a
private apt database (APT_CONFIG: a dpkg status file and a local repository of package
stanzas), never the machine's: an installed systemd 252.38 while the lists also hold 252.39,
the point release that once came in as a dependency of a missing systemd-container."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.harness import REPO, _scrubbed_env

SCRIPT = REPO / "scripts" / "install-system-deps.sh"
OLD, NEW = "252.38-1~deb12u1", "252.39-1~deb12u2"


def stanza(name: str, version: str, *, source: str = "", depends: str = "") -> str:
    lines = [f"Package: {name}", f"Version: {version}", "Architecture: amd64",
             "Maintainer: t <t@example.org>", "Description: x"]  # fmt: skip
    if source:
        lines.append(f"Source: {source}")
    if depends:
        lines.append(f"Depends: {depends}")
    return "\n".join(lines)


def systemd_family(version: str, *, container: bool = True) -> list[str]:
    out = [
        stanza("libsystemd0", version, source="systemd"),
        stanza("systemd", version, depends=f"libsystemd0 (= {version})"),
    ]
    if container:
        out.append(stanza("systemd-container", version, source="systemd",
                          depends=f"systemd (= {version})"))  # fmt: skip
    return out


class Apt:
    """A private apt: `installed` in its dpkg status, `available` in its one repository."""

    def __init__(self, root: Path, installed: list[str], available: list[str]):
        if not shutil.which("apt-get"):
            pytest.skip("NOT RUN: no apt-get on this machine (the script is for Debian)")
        for d in ("etc/apt/apt.conf.d", "etc/apt/preferences.d", "etc/apt/sources.list.d",
                  "var/lib/apt/lists/partial", "var/cache/apt/archives/partial",
                  "var/lib/dpkg/updates", "var/lib/dpkg/info", "var/log/apt", "repo"):  # fmt: skip
            (root / d).mkdir(parents=True, exist_ok=True)
        self.status = root / "var/lib/dpkg/status"
        self.status.write_text("".join(f"{s}\nStatus: install ok installed\n\n" for s in installed))
        (root / "repo/Packages").write_text(
            "".join(f"{s}\nFilename: ./x.deb\nSize: 1\n\n" for s in available)
        )
        (root / "etc/apt/sources.list").write_text(f"deb [trusted=yes] file:{root}/repo ./\n")
        self.conf = root / "apt.conf"
        self.conf.write_text(
            f'Dir "{root}/";\n'
            f'Dir::State::status "{self.status}";\n'
            f'Dir::Etc::Parts "{root}/etc/apt/apt.conf.d";\n'
            'Dir::Bin::Methods "/usr/lib/apt/methods";\n'
            f'Dir::Log "{root}/var/log/apt";\n'
            'APT::Architecture "amd64";\nAPT::Architectures { "amd64"; };\n'
            'Debug::NoLocking "true";\n'
        )
        self.env = {**_scrubbed_env(), "APT_CONFIG": str(self.conf), "LC_ALL": "C"}
        update = self.apt("apt-get", "update")
        assert update.returncode == 0, update.stdout + update.stderr

    def apt(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=120)

    def script(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.apt("bash", str(SCRIPT), "--simulate", *args)

    def status_hash(self) -> str:
        return hashlib.sha256(self.status.read_bytes()).hexdigest()


def upgrades(plan: str) -> list[str]:
    """apt-get -s lines that change an installed package ("Inst X [old] (new)", "Remv X")."""
    return [line for line in plan.splitlines() if line.startswith(("Inst ", "Remv ", "Purg "))
            and (line.startswith(("Remv", "Purg")) or " [" in line.split("(")[0])]  # fmt: skip


def test_a_missing_package_comes_in_its_installed_siblings_version(tmp_path: Path) -> None:
    apt = Apt(tmp_path, systemd_family(OLD, container=False),
              systemd_family(OLD) + systemd_family(NEW))  # fmt: skip
    # what apt alone does with the old command: the dependency upgrades the installed systemd
    bare = apt.apt("apt-get", "-s", "install", "--no-install-recommends", "--no-upgrade",
                   "systemd-container")  # fmt: skip
    assert f"Inst systemd [{OLD}] ({NEW}" in bare.stdout, bare.stdout
    r = apt.script("systemd-container", "systemd")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"Inst systemd-container ({OLD}" in r.stdout, r.stdout
    assert upgrades(r.stdout) == [], r.stdout
    assert "would install systemd-container, changing nothing installed" in r.stdout


def newer_series_only(tmp_path: Path) -> Apt:
    """systemd 252.38 installed; the lists hold only 252.39 of the family (Debian's mirror
    since bookworm's 12.15 point release): systemd-container cannot come in at 252.38."""
    return Apt(tmp_path, systemd_family(OLD, container=False),
               systemd_family(OLD, container=False) + systemd_family(NEW, container=False)
               + [stanza("libsystemd-shared", NEW, source="systemd"),
                  stanza("systemd-container", NEW, source="systemd",
                         depends=f"libsystemd-shared (= {NEW}), systemd (= {NEW})")])  # fmt: skip


def test_a_newer_series_of_programs_only_is_unpacked_privately(tmp_path: Path) -> None:
    apt = newer_series_only(tmp_path)
    before = apt.status_hash()
    r = apt.script("systemd-container")
    assert r.returncode == 0, r.stdout + r.stderr
    line = "would unpack systemd-container privately"
    assert line in r.stdout, r.stdout
    # the package and the library it depends on at its own version, nothing else
    assert r.stdout.split("changing nothing installed: ")[1].split() == [
        "systemd-container",
        "libsystemd-shared",
    ], r.stdout
    assert "Inst " not in r.stdout
    assert apt.status_hash() == before


def test_a_newer_series_of_anything_else_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    apt = newer_series_only(tmp_path)
    (tmp_path / "repo/Packages").write_text(
        (tmp_path / "repo/Packages").read_text()
        + f"{stanza('systemd-journal-remote', NEW, source='systemd', depends=f'systemd (= {NEW})')}"
        "\nFilename: ./x.deb\nSize: 1\n\n"
    )
    assert apt.apt("apt-get", "update").returncode == 0
    before = apt.status_hash()
    r = apt.script("systemd-container", "systemd-journal-remote")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "refused, nothing was installed or changed" in r.stderr, r.stderr
    assert "systemd-journal-remote : Depends: systemd (= " in r.stderr, r.stderr  # apt's reason
    assert "apt-get install systemd-journal-remote" in r.stderr  # what to run if acceptable
    assert "Inst " not in r.stdout and "would unpack" not in r.stdout
    assert apt.status_hash() == before


def test_a_dependency_that_needs_a_newer_library_is_refused(tmp_path: Path) -> None:
    libc_old, libc_new = "2.36-9+deb12u9", "2.36-9+deb12u10"
    apt = Apt(
        tmp_path,
        [stanza("libc6", libc_old, source="glibc")],
        [stanza("libc6", libc_old, source="glibc"), stanza("libc6", libc_new, source="glibc"),
         stanza("prometheus", "2.42.0+ds-5", depends=f"libc6 (>= {libc_new})")],
    )  # fmt: skip
    bare = apt.apt("apt-get", "-s", "install", "--no-upgrade", "prometheus")
    assert f"Inst libc6 [{libc_old}]" in bare.stdout, bare.stdout
    r = apt.script("prometheus")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "prometheus : Depends: libc6" in r.stderr, r.stderr


def test_what_is_installed_is_not_asked_for_and_an_unknown_package_is_named(
    tmp_path: Path,
) -> None:
    apt = Apt(tmp_path, systemd_family(OLD), systemd_family(OLD) + systemd_family(NEW))
    r = apt.script("systemd", "systemd-container")
    assert r.returncode == 0 and "all 2 present" in r.stdout, r.stdout + r.stderr
    r = apt.script("systemd", "no-such-package")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "the package lists have no version of: no-such-package" in r.stderr, r.stderr
