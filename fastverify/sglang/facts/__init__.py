"""One SGLang release's facts, as its own wheel declares them, and the version policy.

The data files beside this module (`<release>.json`, one per release 0.5.1 .. 0.5.23, the
latest .postN of each) are written by scripts/sglang_facts.py from each release's wheel
(read with `ast`, never imported) and re-derived by tests/contract/test_sglang_facts_contract.py.
They are loaded lazily, one file per version asked for.

Policy for the server's SGLang version (`resolve`):
- a release in the range: its own facts;
- newer than the newest known: the newest facts, `supported` False and a loud `warning`
  (the start-up log, status, doctor and `fastverify_engine_info` carry it);
- older than the oldest known: `VersionTooOld` (the daemon refuses before any load).

`SGLangFacts.require(feature, what)` raises `FeatureMissing` ("SGLang X.Y.Z has no ...")
for a profile, mode or command that needs what the version lacks.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any, cast

# (os.path, not pathlib; a plain class, not a dataclass: fastverifyctl's start-up path
# imports this module through fastverify.sglang.versions, tests/integration/test_cli_imports.py)
DATA_DIR = os.path.dirname(os.path.abspath(__file__))

# what each feature means, for messages ("SGLang 0.5.10 has no <this>")
FEATURE_TEXT = {
    "pcie_ipc_allreduce": "FlashInfer PCIe-IPC all-reduce (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE)",
    "adaptive_speculation": "adaptive speculation (--speculative-adaptive)",
    "step_spans": "profiler step spans (step[... bs=N]) for verify-cycle timing",
    "start_profile_num_steps": "/start_profile num_steps",
    "custom_all_reduce": "custom all-reduce switch (--disable-custom-all-reduce)",
}
# the facts' own keys; any other is a section of its own that a companion process's module
# reads (`SGLangFacts.section`)
_KEYS = ("schema", "version", "wheel", "flags", "metrics", "spans", "endpoints", "log_formats",
         "env", "profile_options", "features")  # fmt: skip


class VersionTooOld(ValueError):
    """The server's SGLang is older than the oldest release fastverify knows."""


class FeatureMissing(ValueError):
    """The server's SGLang lacks a feature a profile, mode or command needs."""


def parse(text: str) -> tuple[int, ...]:
    """`"0.5.10.post1"` -> (0, 5, 10); the release, without post/dev/local parts."""
    out = []
    for piece in text.strip().lstrip("v").split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        out.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(out)


@functools.lru_cache(maxsize=1)
def known_versions() -> tuple[str, ...]:
    """The releases with a data file, oldest first."""
    names = [n[: -len(".json")] for n in os.listdir(DATA_DIR) if n.endswith(".json")]
    return tuple(sorted(names, key=parse))


def oldest() -> str:
    return known_versions()[0]


def newest() -> str:
    return known_versions()[-1]


def range_text() -> str:
    """The supported range as people read releases: `0.5.1 .. 0.5.23` (each release's data
    file may be a .postN of it: `versions` lists them)."""
    return f"{parse_text(oldest())} .. {parse_text(newest())}"


# A release as pip and SGLang spell it: 0.5.23, v0.5.10.post1, 0.5.24rc1, 0.5.23.dev0+gabc
# (compiled by `re` on first use: `profile list` reads the pinned release's facts by name)
_VERSION = r"v?\d+(\.\d+){1,3}((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[\w.]+)?"


def release_for(version: str) -> str | None:
    """The known release whose X.Y.Z equals `version`'s (any .postN), else None."""
    want = parse(version)
    for known in known_versions():
        if parse(known) == want:
            return known
    return None


@functools.lru_cache(maxsize=32)
def _data(release: str) -> dict[str, Any]:
    with open(os.path.join(DATA_DIR, f"{release}.json"), encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
        return data


_SGLANG_VARS_KEY = '"sglang_vars":'


@functools.lru_cache(maxsize=4)
def _sglang_vars(release: str) -> dict[str, str]:
    """`env.sglang_vars` of a release's facts. `profile list` checks a profile's `SGLANG_*`
    names against it and needs nothing else of the file: where the key occurs once in the
    text (scripts/sglang_facts.py writes it once, under `env`), its value alone is decoded, a
    third of the file; else the whole file."""
    with open(os.path.join(DATA_DIR, f"{release}.json"), encoding="utf-8") as fh:
        text = fh.read()
    at = text.find(_SGLANG_VARS_KEY)
    if at >= 0 and text.find(_SGLANG_VARS_KEY, at + 1) < 0:
        start = at + len(_SGLANG_VARS_KEY)
        while text[start : start + 1].isspace():
            start += 1
        try:
            value, _end = json.JSONDecoder().raw_decode(text, start)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
    return cast("dict[str, str]", _data(release)["env"]["sglang_vars"])


class SGLangFacts:
    """The facts that serve a server running SGLang `version`.

    `facts_version` is the data file's release (the newest one for a version newer than
    the range); `supported` is True only when the two are the same release."""

    __slots__ = ("facts_version", "supported", "version")

    def __init__(self, version: str, facts_version: str, supported: bool) -> None:
        self.version = version
        self.facts_version = facts_version
        self.supported = supported

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SGLangFacts) and (
            self.version,
            self.facts_version,
            self.supported,
        ) == (other.version, other.facts_version, other.supported)

    def __hash__(self) -> int:
        return hash((self.version, self.facts_version, self.supported))

    def __repr__(self) -> str:
        return f"SGLangFacts({self.version!r}, facts={self.facts_version!r})"

    @property
    def data(self) -> dict[str, Any]:
        return _data(self.facts_version)

    @property
    def warning(self) -> str | None:
        if self.supported:
            return None
        return (
            f"SGLang {self.version} is newer than the newest release fastverify knows "
            f"({newest()}): running with {self.facts_version}'s facts (flags, log lines, "
            "metrics, spans may have drifted); upgrade fastverify for its own facts"
        )

    @property
    def flags(self) -> dict[str, list[str] | None]:
        return cast("dict[str, list[str] | None]", self.data["flags"])

    @property
    def metrics(self) -> dict[str, list[str]]:
        return cast("dict[str, list[str]]", self.data["metrics"])

    @property
    def spans(self) -> dict[str, Any]:
        return cast("dict[str, Any]", self.data["spans"])

    @property
    def endpoints(self) -> dict[str, list[str]]:
        return cast("dict[str, list[str]]", self.data["endpoints"])

    @property
    def log_formats(self) -> dict[str, list[dict[str, Any]]]:
        return cast("dict[str, list[dict[str, Any]]]", self.data["log_formats"])

    @property
    def env(self) -> dict[str, Any]:
        return cast("dict[str, Any]", self.data["env"])

    @property
    def sglang_vars(self) -> dict[str, str]:
        """`env["sglang_vars"]`: every `SGLANG_*` variable the release declares, with its
        parser kind (read without decoding the rest of the file)."""
        return _sglang_vars(self.facts_version)

    @property
    def features(self) -> dict[str, Any]:
        return cast("dict[str, Any]", self.data["features"])

    def section(self, name: str) -> dict[str, Any] | None:
        """A section of its own (not one of `_KEYS`) as the wheel declares it, read by the
        module of the companion it describes; None where the release has none."""
        found: dict[str, Any] | None = self.data.get(name)
        return found

    @property
    def flag_generation(self) -> str:
        return str(self.features["flag_generation"])

    @property
    def verify_stage(self) -> str | None:
        """The stage name of the target verify forward's span (VERIFY / TARGET_VERIFY)."""
        return self.spans.get("verify_stage")

    @property
    def server_info_endpoint(self) -> str:
        return str(self.features["server_info_endpoint"])

    def _pieces(self, kind: str) -> list[str]:
        found = self.log_formats.get(kind) or []
        return list(found[0]["pieces"]) if found else []

    @property
    def decode_old_form(self) -> bool:
        """The decode/prefill lines' older form (`Decode batch. ..., ` to 0.5.3)."""
        pieces = self._pieces("decode")
        return bool(pieces) and pieces[0].startswith("Decode batch.")

    @property
    def decode_accept_rate(self) -> bool:
        """Does the decode line carry `accept rate:` next to `accept len:`?"""
        return any("accept rate:" in p for p in self._pieces("decode"))

    def has_flag(self, flag: str) -> bool:
        return flag in self.flags

    def has_metric(self, name: str) -> bool:
        return name in self.metrics

    def metric_labels(self, name: str) -> tuple[str, ...]:
        return tuple(self.metrics.get(name, ()))

    def has(self, feature: str) -> bool:
        return bool(self.features.get(feature))

    def require(self, feature: str, what: str) -> None:
        """FeatureMissing("SGLang X has no FEATURE: WHAT needs it ...") unless present."""
        if self.has(feature):
            return
        since = first_with(feature)
        hint = f" (it came in {since})" if since else ""
        raise FeatureMissing(
            f"SGLang {self.version} has no {FEATURE_TEXT.get(feature, feature)}{hint}: "
            f"{what} needs it; pick another profile/mode or run a newer SGLang"
        )

    def require_flag(self, flag: str, what: str) -> None:
        if not self.has_flag(flag):
            raise FeatureMissing(f"SGLang {self.version} has no {flag}: {what} needs it")

    def summary(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "facts_version": self.facts_version,
            "supported": self.supported,
            "range": [oldest(), newest()],
            "warning": self.warning,
        }

    def to_json(self) -> dict[str, Any]:
        """`fastverifyctl sglang facts --json`."""
        return {
            "version": self.version,
            "facts_version": self.facts_version,
            "supported": self.supported,
            "warning": self.warning,
            "flags": sorted(self.flags),
            "flag_choices": {k: v for k, v in self.flags.items() if v is not None},
            "metrics": self.metrics,
            "spans": self.spans,
            "endpoints": self.endpoints,
            "log_formats": self.log_formats,
            "env": self.env,
            "profile_options": self.data.get("profile_options", []),
            "features": self.features,
            **{k: v for k, v in self.data.items() if k not in _KEYS},
            "wheel": self.data.get("wheel"),
        }


def first_with(feature: str) -> str | None:
    for v in known_versions():
        if _data(v)["features"].get(feature):
            return v
    return None


def resolve(version: str) -> SGLangFacts:
    """The facts for a server running SGLang `version`, by the policy above."""
    if version in known_versions():  # a release's own name (the pinned one): no parsing
        return SGLangFacts(version, version, True)
    want = parse(version)
    if len(want) < 2 or not re.fullmatch(_VERSION, version.strip()):
        raise VersionTooOld(
            f"SGLang version {version!r} is not a version (expected X.Y.Z, e.g. 0.5.23 or "
            f"0.5.10.post1; supported {range_text()})"
        )
    release = release_for(version)
    if release is not None:
        return SGLangFacts(version, release, True)
    if want > parse(newest()):
        return SGLangFacts(version, newest(), False)
    if want < parse(oldest()):
        raise VersionTooOld(
            f"SGLang {version} is older than the oldest release fastverify supports "
            f"({range_text()}): install sglang>={parse_text(oldest())} in the "
            "server's interpreter (or use an lmsysorg/sglang image in the range)"
        )
    # inside the range but not a release we have (a yanked or skipped number)
    below = [v for v in known_versions() if parse(v) < want]
    return SGLangFacts(version, below[-1], False)


def parse_text(version: str) -> str:
    return ".".join(str(p) for p in parse(version))


def load(version: str) -> SGLangFacts:
    """A known release's own facts (KeyError-free: VersionTooOld/newest as `resolve`)."""
    return resolve(version)
