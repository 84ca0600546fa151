"""Tuner profiles: a profile that names a tuner table, and what the daemon makes of it.

A profile uses the tuner by setting the table variable, normally to a file beside it:

    # description: NCCL tuner table measured on this host
    # extends: nccl-default
    FASTVERIFY_TUNER_TABLE=mytuned.tuner.csv

A bare or relative value is resolved against the directory of the profile file that
sets it (an `extends` base's own directory when inherited); an absolute path is taken
as is. For the engine, `tuner_env(profile)` gives the two variables NCCL and the
plugin read: NCCL_TUNER_PLUGIN=<absolute path of the built plugin> and
FASTVERIFY_TUNER_TABLE=<absolute path of the table>. A profile that sets
NCCL_TUNER_PLUGIN itself keeps its own value.

`check_profile_tuner` is what validation adds for such a file: the table's own checks
(file:line), and that the plugin is built on this host.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fastverify.profiles.model import Problem, Profile
from fastverify.tuner import plugin as plugin_mod
from fastverify.tuner.table import check_table

TABLE_ENV = plugin_mod.TABLE_ENV
PLUGIN_ENV = "NCCL_TUNER_PLUGIN"


def profile_text(table_name: str, description: str, base: str) -> str:
    """The env file of a tuner profile: `base` extended, `table_name` (beside it) named."""
    from fastverify.profiles import envfile

    return envfile.render(
        {TABLE_ENV: table_name}, description=description, extends=base, tags=("tuner",)
    )


def resolve_value(value: str, profile_dir: Path) -> Path:
    p = Path(value)
    return p if p.is_absolute() else (profile_dir / p)


def _setter_dir(profile: Profile) -> Path:
    """Directory of the profile file that set the table variable."""
    setter = profile.env_sources.get(TABLE_ENV, profile.name)
    if setter == profile.name:
        return profile.path.parent
    from fastverify import paths

    for d in [*paths.user_profile_dirs(), profile.path.parent, paths.shipped_profile_dir()]:
        if (d / f"{setter}.env").is_file():
            return d
    return profile.path.parent


def table_path(profile: Profile) -> Path | None:
    """Absolute path of the profile's table, or None when it names none."""
    value = profile.env.get(TABLE_ENV)
    if not value:
        return None
    return resolve_value(value, _setter_dir(profile)).resolve()


def tuner_env(profile: Profile) -> dict[str, str]:
    """The variables the engine needs for the profile's tuner ({} without one). The
    plugin path is left out when the plugin is not built (validation reports that;
    the daemon's check then fails the switch with `tuner_not_loaded`)."""
    table = table_path(profile)
    if table is None:
        return {}
    out = {TABLE_ENV: str(table)}
    if not profile.env.get(PLUGIN_ENV):
        so = plugin_mod.find_plugin()
        if so is not None:
            out[PLUGIN_ENV] = str(so)
    return out


def check_profile_tuner(
    path: str,
    own_env: Mapping[str, str],
    lines: Mapping[str, int],
    has_nvlink: bool | Callable[[], bool | None] | None,
    force: bool,
) -> list[Problem]:
    """Problems of a profile file that sets the table variable itself."""
    value = own_env.get(TABLE_ENV)
    if value is None:
        return []
    line = lines.get(TABLE_ENV, 0)
    problems: list[Problem] = []
    if not value.endswith(".csv"):
        problems.append(
            Problem(path, line, f"{TABLE_ENV}={value}: a tuner table is a .csv file", "warning")
        )
    table = resolve_value(value, Path(path).parent)
    if not table.is_file():
        problems.append(
            Problem(
                path,
                line,
                f"{TABLE_ENV}: no tuner table at {table} (derive one with "
                "`fastverifyctl preflight --derive-tuner NAME`, or fix the name)",
            )
        )
    else:
        check = check_table(table, has_nvlink, force)
        problems += check.problems
        if check.ok and not check.rows:
            problems.append(
                Problem(path, line, f"{TABLE_ENV}: {table} has no rows (NCCL chooses)", "warning")
            )
    if not own_env.get(PLUGIN_ENV) and plugin_mod.find_plugin() is None:
        problems.append(Problem(path, line, f"{TABLE_ENV}: {plugin_mod.not_found_message()}"))
    elif (so := own_env.get(PLUGIN_ENV)) and so.startswith("/") and not Path(so).is_file():
        problems.append(
            Problem(path, lines.get(PLUGIN_ENV, line), f"{PLUGIN_ENV}: no file at {so}")
        )
    return problems


def tuner_view(profile: Profile) -> dict[str, Any] | None:
    """For `profile show --effective`: the table (rows or problems) and the plugin."""
    table = table_path(profile)
    if table is None:
        return None
    check = check_table(table)
    so = profile.env.get(PLUGIN_ENV) or plugin_mod.find_plugin()
    return {
        "table": str(table),
        "plugin": str(so) if so else None,
        "rows": [r.to_dict() for r in check.rows],
        "problems": [str(p) for p in check.problems],
    }


def tuner_lines(view: Mapping[str, Any]) -> list[str]:
    """Text for `profile show --effective`."""
    out = [f"  tuner table: {view['table']}", f"  tuner plugin: {view['plugin'] or 'NOT BUILT'}"]
    for r in view["rows"]:
        ranks = "any" if r["nranks"] is None else r["nranks"]
        out.append(
            f"    {r['collective']} {r['min_bytes']}..{r['max_bytes']} B -> {r['choice']} "
            f"(nranks={ranks})"
        )
    if not view["rows"]:
        out.append("    (no rows: NCCL chooses every size)")
    out += [f"    {p}" for p in view["problems"]]
    return out
