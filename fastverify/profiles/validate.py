"""Validation of a parsed profile against NCCL's real grammar and the profile metadata rules.

`validate(parsed, topology=None, force=False)` returns every problem (errors and
warnings) for one `ParsedFile`. Checks:

- names: unknown `NCCL_*` (with a did-you-mean), `NCCL_VERSION` (image metadata),
  removed (error) and deprecated (warning) names; `SGLANG_*` names and values as SGLang
  0.5.23 declares and parses them (profiles/sglang_vars.py: a near miss of a declared
  name is a typo); any other family is refused (profiles/env_policy.py: a profile is an
  NCCL/SGLang/FlashInfer env file, nothing more);
- files: plugin paths and code directories must be trusted (env_policy.trust_problem);
- values by kind (see nccl_vars.py), including NCCL_ALGO/NCCL_PROTO lists with `^`
  and the 2.24+ per-collective syntax `ring;allreduce:tree,ring`;
- cross-variable: MIN > MAX channel/CTA counts, P2P_DISABLE with P2P_LEVEL;
- LL128 forced by NCCL_PROTO without NVLink: an error unless `force`; a warning when
  the topology is unknown;
- metadata: `requires:` keys/values, `extends:` and `tags:` syntax, a description;
- a tuner table named by FASTVERIFY_TUNER_TABLE: the table's own checks (file:line)
  and that the plugin is built (fastverify.profiles.tuner).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from fastverify.profiles import env_policy, nccl_vars, sglang_vars
from fastverify.profiles.envfile import ASCII_DIGITS, ASCII_LETTERS, ParsedFile, is_word
from fastverify.profiles.model import Problem, Record, Severity

# What the daemon can turn into server flags.
REQUIRES: dict[str, tuple[str, ...]] = {
    "cuda-graph": ("on", "off"),
    "custom-all-reduce": ("on", "off"),
}
_ALNUM = ASCII_LETTERS | ASCII_DIGITS
_NAME_REST = _ALNUM | {".", "_", "-"}
_TAG_FIRST = frozenset("abcdefghijklmnopqrstuvwxyz") | ASCII_DIGITS
_TAG_REST = _TAG_FIRST | {".", "_", "-"}


def is_profile_name(text: str) -> bool:
    """A profile name: `[A-Za-z0-9][A-Za-z0-9._-]{0,63}`."""
    return is_word(text, _ALNUM, _NAME_REST, 64)


def is_tag(text: str) -> bool:
    """A tag: `[a-z0-9][a-z0-9._-]{0,31}`."""
    return is_word(text, _TAG_FIRST, _TAG_REST, 32)


def _is_int(text: str) -> bool:
    """A plain decimal integer: `-?(0|[1-9][0-9]*)`."""
    digits = text[1:] if text.startswith("-") else text
    return digits == "0" or (digits[:1] not in ("", "0") and ASCII_DIGITS.issuperset(digits))


class Topology(Record):
    """What validation needs to know about the GPUs: NVLink present? (None: unknown)."""

    _fields = ("has_nvlink", "source")
    has_nvlink: bool | None
    source: str

    def __init__(self, has_nvlink: bool | None = None, source: str = "unknown"):
        self._set(has_nvlink=has_nvlink, source=source)


UNKNOWN_TOPOLOGY = Topology()


class ListSpecError(ValueError):
    pass


def parse_list_spec(value: str, elems: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Parse an NCCL_ALGO/NCCL_PROTO value like NCCL's parseList (src/graph/tuning.cc).

    Returns {collective: {element: 1|0}} for the collectives the value mentions (a
    first entry without prefix applies to all). Raises ListSpecError with an
    actionable message for anything NCCL would refuse or silently misread.
    """
    lower = {e.lower(): e for e in elems}
    colls = {c.lower(): c for c in nccl_vars.COLLECTIVES}
    result: dict[str, dict[str, int]] = {}
    seen_prefix: set[str] = set()
    entries = value.split(";")
    for idx, entry in enumerate(entries):
        if entry == "":
            raise ListSpecError(f"empty entry in {value!r} (remove the extra ';')")
        parts = entry.split(":")
        if len(parts) > 2:
            raise ListSpecError(f"more than one ':' in {entry!r} (write collective:elem,elem)")
        if len(parts) == 2:
            prefix, elem_list = parts
            if prefix.lower() not in colls:
                raise ListSpecError(
                    f"unknown collective {prefix!r} in {entry!r} "
                    f"(valid: {', '.join(nccl_vars.COLLECTIVES)}; case-insensitive)"
                )
            canon = colls[prefix.lower()]
            if canon in seen_prefix:
                raise ListSpecError(
                    f"{canon} given twice in {value!r} (keep one entry per collective)"
                )
            seen_prefix.add(canon)
            targets: tuple[str, ...] = (canon,)
            if elem_list == "":
                raise ListSpecError(f"empty list after {prefix + ':'!r} (name at least one)")
        else:
            if idx > 0:
                raise ListSpecError(
                    f"entry {entry!r} has no collective prefix; every entry after the first "
                    f"needs one (e.g. allreduce:{entry})"
                )
            elem_list = parts[0]
            targets = nccl_vars.COLLECTIVES
        exclude = elem_list.startswith("^")
        if exclude:
            elem_list = elem_list[1:]
            if elem_list == "":
                raise ListSpecError(f"'^' with nothing after it in {value!r} (write ^{elems[0]})")
        chosen: list[str] = []
        for tok in elem_list.split(","):
            if tok == "":
                raise ListSpecError(f"empty item in {elem_list!r} (remove the extra ',')")
            if tok.startswith("^"):
                raise ListSpecError(
                    f"'^' inside a list ({tok!r}): NCCL accepts '^' only at the start, where "
                    f"it excludes the whole list (list the ones to use, or write ^{tok[1:]})"
                )
            if tok.lower() not in lower:
                raise ListSpecError(
                    f"unknown token {tok!r} (valid: {', '.join(elems)}; case-insensitive)"
                )
            chosen.append(lower[tok.lower()])
        for target in targets:
            table = dict.fromkeys(elems, 1 if exclude else 0)
            for c in chosen:
                table[c] = 0 if exclude else 1
            result[target] = table
    return result


def ll128_forced(proto_value: str) -> bool:
    """True when NCCL_PROTO=value explicitly enables LL128 for some collective.

    NCCL enables LL128 by default only where it is safe (NVLink); any user list that
    leaves LL128 enabled (`LL128`, or an exclusion such as `^LL`) overrides that.
    """
    try:
        spec = parse_list_spec(proto_value, nccl_vars.PROTOCOLS)
    except ListSpecError:
        return False
    return any(table.get("LL128") == 1 for table in spec.values())


def check_value(var: nccl_vars.NcclVar, value: str) -> tuple[Severity, str] | None:
    """(severity, message) for a bad value of a known variable, or None when it is fine."""
    k = var.kind
    if k in ("int", "switch", "bytes", "nthreads"):
        if not _is_int(value):
            hint = ""
            if len(value) > 24:  # no numeric hint (str() of a huge int raises)
                hint = f" ({len(value)} characters)"
            elif re.fullmatch(r"0[0-7]+", value):
                hint = f"; NCCL reads {value} as octal {int(value, 8)}"
            elif re.fullmatch(r"0[xX][0-9a-fA-F]+", value):
                hint = f"; write {int(value, 16)}"
            elif m := re.match(r"-?\d+", value):
                hint = f"; NCCL would read {m.group()} and drop the rest"
            else:
                hint = "; NCCL would silently read 0"
            return (
                "error",
                f"{value!r} is not a plain integer{hint} (expected {var.describe_values()})",
            )
        if len(value.lstrip("+-")) > 19:  # NCCL reads int64; int() refuses >4300 digits
            return (
                "error",
                f"{value[:24]}... is {len(value)} digits long (NCCL reads 64-bit integers)",
            )
        n = int(value)
        if k == "switch" and value not in ("0", "1"):
            return "error", f"{value!r} is not a switch (expected 0 or 1)"
        if k == "bytes" and n <= 0:
            return "error", f"{value!r} is not a positive size (expected {var.describe_values()})"
        if k == "nthreads" and (n % 32 or not 64 <= n <= 512):
            return "error", f"{value!r} (expected {var.describe_values()})"
        too_low = var.lo is not None and n < var.lo
        too_high = var.hi is not None and n > var.hi
        if k == "int" and (too_low or too_high):
            return "error", f"{value!r} out of range (expected {var.describe_values()})"
        return None
    if k == "enum":
        ok = value.upper() in (c.upper() for c in var.choices) if var.ci else value in var.choices
        if not ok:
            case = " (case-insensitive)" if var.ci else ""
            return (
                "error",
                f"{value!r} is not valid (expected one of {', '.join(var.choices)}{case})",
            )
        return None
    if k in ("algo", "proto"):
        elems = nccl_vars.ALGORITHMS if k == "algo" else nccl_vars.PROTOCOLS
        try:
            parse_list_spec(value, elems)
        except ListSpecError as exc:
            return "error", str(exc)
        if ";" in value or ":" in value:
            return (
                "warning",
                "per-collective syntax needs NCCL 2.24 or newer (older NCCL refuses it)",
            )
        return None
    if k == "level":
        if value in nccl_vars.LEVEL_WORDS:
            return None
        if value.upper() in nccl_vars.LEVEL_WORDS:
            return "error", (
                f"{value!r}: level words are case-sensitive and NCCL silently ignores "
                f"this one (write {value.upper()})"
            )
        if value in nccl_vars.LEVEL_DIGITS:
            return "warning", (
                f"legacy numeric level {value} means {nccl_vars.LEVEL_DIGITS[value]} "
                f"(write {nccl_vars.LEVEL_DIGITS[value]})"
            )
        return "error", (
            f"{value!r} is not a level; NCCL silently ignores it "
            f"(expected one of {', '.join(nccl_vars.LEVEL_WORDS)})"
        )
    if k == "subsys":
        body = value[1:] if value.startswith("^") else value
        valid = {s.upper() for s in nccl_vars.DEBUG_SUBSYS}
        for tok in body.split(","):
            if tok.upper() not in valid:
                return "error", (
                    f"unknown subsystem {tok!r} (valid: {', '.join(nccl_vars.DEBUG_SUBSYS)})"
                )
        return None
    return None


def check_name(name: str) -> tuple[Severity, str] | None:
    """(severity, message) for a variable name that does not belong in a profile, or None."""
    if name in nccl_vars.METADATA_ONLY:
        return "error", (
            f"{name} is image metadata set by NVIDIA's CUDA images, not a tuning knob "
            "(remove it; NCCL's version comes from the installed library)"
        )
    if name.startswith("NCCL_"):
        var = nccl_vars.lookup(name)
        if var is None:
            close = nccl_vars.suggest(name)
            hint = (
                f"did you mean {' or '.join(close)}?"
                if close
                else "see `fastverifyctl profile vars`"
            )
            return "error", f"unknown NCCL variable {name} ({hint})"
        if var.status == "removed":
            return "error", f"{name} is no longer read by NCCL (use {var.replacement})"
        if var.status == "deprecated":
            return "warning", f"{name} is deprecated (use {var.replacement})"
        return None
    if name.upper().startswith("NCCL_") and nccl_vars.lookup(name.upper()):
        return "error", f"{name}: names are case-sensitive; NCCL reads {name.upper()} (write that)"
    if name.upper().startswith("SGLANG_") and name not in env_policy.SGLANG_CODE_VARS:
        return sglang_vars.check_name(name)
    if problem := env_policy.profile_name_problem(name):
        return "error", problem
    return None


def validate(
    parsed: ParsedFile,
    topology: Topology | Callable[[], Topology] | None = None,
    force: bool = False,
    env: dict[str, str] | None = None,
    lines: dict[str, int] | None = None,
) -> list[Problem]:
    """All problems of one parsed file (its own parse problems included).

    `env`, when given, is the resolved environment after `extends` (cross-variable
    and LL128 checks use it; `lines` says where each key is reported); default: the
    file's own assignments. `topology` may be a callable, called only when a check
    needs it (LL128), so validation never runs nvidia-smi otherwise.
    """
    problems = list(parsed.problems)
    path = parsed.path

    def add(line: int, sev_msg: tuple[Severity, str] | None, prefix: str = "") -> None:
        if sev_msg:
            sev, msg = sev_msg
            problems.append(Problem(path, line, prefix + msg, sev))

    for a in parsed.assignments:
        name_problem = check_name(a.key)
        add(a.line, name_problem)
        if name_problem and name_problem[0] == "error":
            continue
        var = nccl_vars.lookup(a.key)
        if var is not None:
            add(a.line, check_value(var, a.value), f"{a.key}: ")
        elif a.key.startswith("SGLANG_"):
            add(a.line, sglang_vars.check_value(a.key, a.value), f"{a.key}: ")
        if trust := env_policy.trust_problem(a.key, a.value):
            add(a.line, ("error", trust), f"{a.key}: ")

    _check_meta(parsed, problems)
    full = dict(env) if env is not None else parsed.env
    if lines is None:
        lines = {a.key: a.line for a in parsed.assignments}
    _cross_checks(path, full, lines, problems)
    _ll128_check(path, full, lines, topology, force, problems)
    _pcie_checks(path, full, lines, topology, problems)
    _tuner_checks(parsed, topology, force, problems)
    problems.sort(key=lambda p: p.line)  # stable: file order, parse problems first per line
    return problems


def _check_meta(parsed: ParsedFile, problems: list[Problem]) -> None:
    path = parsed.path
    # a file refused before it was read (over the size cap, a link out of its directory)
    unread = any(p.line == 0 and p.severity == "error" for p in parsed.problems)
    if "description" not in parsed.meta and not unread:
        problems.append(
            Problem(
                path,
                1 if parsed.line_count else 0,
                "no '# description:' line (add one: it is what `profile list` shows)",
                "warning",
            )
        )
    if "requires" in parsed.meta:
        line, raw = parsed.meta["requires"]
        for msg in requires_problems(raw):
            problems.append(Problem(path, line, msg))
    if "extends" in parsed.meta:
        line, raw = parsed.meta["extends"]
        if not is_profile_name(raw):
            problems.append(
                Problem(
                    path,
                    line,
                    f"extends: {raw!r} is not a profile name "
                    "(one name: letters, digits, '.', '_', '-')",
                )
            )
    if "tags" in parsed.meta:
        line, raw = parsed.meta["tags"]
        for tag in (t.strip() for t in raw.split(",")):
            if not is_tag(tag):
                problems.append(
                    Problem(
                        path,
                        line,
                        f"tags: {tag!r} is not a tag "
                        "(comma-separated lowercase words, e.g. pcie, eager)",
                    )
                )


def parse_requires(raw: str) -> dict[str, str]:
    """`cuda-graph=off, custom-all-reduce=on` -> dict (no checking; see requires_problems)."""
    out: dict[str, str] = {}
    for item in raw.split(","):
        key, _, value = item.strip().partition("=")
        out[key.strip()] = value.strip()
    return out


def requires_problems(raw: str) -> list[str]:
    msgs: list[str] = []
    seen: set[str] = set()
    for item in (i.strip() for i in raw.split(",")):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            msgs.append(f"requires: {item!r} is not key=value (e.g. cuda-graph=off)")
            continue
        if key not in REQUIRES:
            msgs.append(f"requires: unknown key {key!r} (known: {', '.join(REQUIRES)})")
            continue
        if value not in REQUIRES[key]:
            msgs.append(f"requires: {key}={value} (expected {key}={'|'.join(REQUIRES[key])})")
        if key in seen:
            msgs.append(f"requires: {key} given twice (keep one)")
        seen.add(key)
    return msgs


def _cross_checks(
    path: str, env: dict[str, str], lines: dict[str, int], problems: list[Problem]
) -> None:
    for lo_name, hi_name in (
        ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"),
        ("NCCL_MIN_CTAS", "NCCL_MAX_CTAS"),
        ("NCCL_MIN_P2P_NCHANNELS", "NCCL_MAX_P2P_NCHANNELS"),
    ):
        lo, hi = env.get(lo_name, ""), env.get(hi_name, "")
        if _is_int(lo) and _is_int(hi) and int(lo) > int(hi):
            line = lines.get(lo_name) or lines.get(hi_name) or 0
            problems.append(
                Problem(path, line, f"{lo_name}={lo} is above {hi_name}={hi} (make MIN <= MAX)")
            )
    if env.get("NCCL_P2P_DISABLE") == "1" and "NCCL_P2P_LEVEL" in env:
        line = lines.get("NCCL_P2P_LEVEL") or lines.get("NCCL_P2P_DISABLE") or 0
        problems.append(
            Problem(
                path,
                line,
                "NCCL_P2P_LEVEL has no effect with NCCL_P2P_DISABLE=1 (remove one of them)",
                "warning",
            )
        )


def _ll128_check(
    path: str,
    env: dict[str, str],
    lines: dict[str, int],
    topology_source: Topology | Callable[[], Topology] | None,
    force: bool,
    problems: list[Problem],
) -> None:
    proto = env.get("NCCL_PROTO")
    if not proto or not ll128_forced(proto):
        return
    topology = topology_source() if callable(topology_source) else topology_source
    topology = topology or UNKNOWN_TOPOLOGY
    line = lines.get("NCCL_PROTO", 0)
    if topology.has_nvlink is True:
        return
    if topology.has_nvlink is None:
        problems.append(
            Problem(
                path,
                line,
                "NCCL_PROTO forces LL128 and the GPU topology is unknown: "
                "NCCL documents data corruption with LL128 without NVLink "
                "(check with `fastverifyctl doctor` on the GPU host)",
                "warning",
            )
        )
        return
    if force:
        problems.append(
            Problem(
                path,
                line,
                f"NCCL_PROTO forces LL128 without NVLink ({topology.source}); "
                "accepted because of --force",
                "warning",
            )
        )
        return
    problems.append(
        Problem(
            path,
            line,
            f"NCCL_PROTO forces LL128 but the GPUs have no NVLink "
            f"({topology.source}); NCCL documents data corruption risk "
            "(exclude it with ^LL128, or pass --force)",
        )
    )


def _pcie_checks(
    path: str,
    env: dict[str, str],
    lines: dict[str, int],
    topology_source: Topology | Callable[[], Topology] | None,
    problems: list[Problem],
) -> None:
    """Settings that silently do nothing, or switch P2P off, on GPUs without NVLink."""
    level = env.get("NCCL_P2P_LEVEL")
    algo = env.get("NCCL_ALGO", "")
    wants_nvls = False
    if algo:
        try:
            parse_list_spec(algo, nccl_vars.ALGORITHMS)
        except ListSpecError:
            algo = ""  # reported elsewhere
    for entry in algo.split(";") if algo else []:
        elems = entry.split(":")[-1]
        if not elems.startswith("^") and {t.lower() for t in elems.split(",")} & {
            "nvls",
            "nvlstree",
        }:
            wants_nvls = True
    if level not in ("LOC", "NVL", "0") and not wants_nvls:
        return  # nothing topology-dependent: do not ask for the topology
    topology = topology_source() if callable(topology_source) else topology_source
    if topology is None or topology.has_nvlink is not False:
        return
    if level in ("LOC", "NVL", "0"):
        problems.append(
            Problem(
                path,
                lines.get("NCCL_P2P_LEVEL", 0),
                f"NCCL_P2P_LEVEL={level} turns GPU peer-to-peer off between these GPUs "
                f"({topology.source}); traffic goes through host memory "
                "(use PIX/PXB/PHB/SYS to allow P2P over PCIe)",
                "warning",
            )
        )
    if wants_nvls:
        problems.append(
            Problem(
                path,
                lines.get("NCCL_ALGO", 0),
                f"NCCL_ALGO asks for NVLS/NVLSTree, which need NVLink SHARP (NVSwitch); these "
                f"GPUs have no NVLink ({topology.source}), so NCCL cannot use them "
                "(use Ring or Tree)",
                "warning",
            )
        )


def _tuner_checks(
    parsed: ParsedFile,
    topology_source: Topology | Callable[[], Topology] | None,
    force: bool,
    problems: list[Problem],
) -> None:
    """The tuner table this file names (only files that set the variable themselves)."""
    own = parsed.env
    if "FASTVERIFY_TUNER_TABLE" not in own:
        return
    from fastverify.profiles.tuner import check_profile_tuner

    def has_nvlink() -> bool | None:
        topo = topology_source() if callable(topology_source) else topology_source
        return (topo or UNKNOWN_TOPOLOGY).has_nvlink

    lines = {a.key: a.line for a in parsed.assignments}
    problems.extend(check_profile_tuner(parsed.path, own, lines, has_nvlink, force))
