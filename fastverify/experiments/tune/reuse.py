"""`fastverifyctl tune --reuse PATH`: apply the decision a tune made on an identical host (a
fleet of identical nodes) after a cheap check, instead of the whole funnel.

Every finished tune keys its decision to the host fingerprint (fastverify.host.fingerprint)
in its decision.json and in the decision cache (cache.py: `<tune dir>/decisions/<id>.json`).
`--reuse` takes one such decision.json, or a directory of them (a cache copied from the
first node, or shared), and:

1. runs the inventory (doctor, topology, the PCIe path, versions: no load) and computes this
   host's fingerprint; in a directory it takes the decision of the same fingerprint;
2. refuses when any fact differs, naming each changed fact and the recorded results it
   invalidates (exit 1, nothing switched), or when the decision was never applied there;
3. the cheap check: a preflight of the chosen profile (GPUs only; skipped with its reason
   elsewhere, as tune's), then one short bench of it (the tune's measurement options) in
   the served mode, the decided profile put in place first when something else serves (the
   only load reuse ever makes); the check passes unless the bench is clearly slower than
   the recorded interval: its 95% CI lies wholly below the winner's recorded CI95;
4. records the decision (`POST /v1/decision`), and writes DIR/decision.json with the same
   keys as a tune's plus `reused_from` and `check`; its `engine` stamp is this daemon's
   (checked against the reused one's: a simulated decision stays simulated, and
   `render kubernetes --from-decision` refuses it without --force as it refuses the first).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from fastverify.durable import atomic_write_json
from fastverify.experiments.tune import cache
from fastverify.experiments.tune.context import Ctx, StageResult, TuneConfig

Event = dict[str, Any]


class ReuseError(RuntimeError):
    """Reuse cannot start: no decision record at PATH, or a broken one (usage)."""


def _load(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ReuseError(f"{path}: cannot read the decision record ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("decision"), dict):
        raise ReuseError(f'{path}: no "decision" object (expected a tune\'s decision.json)')
    if not isinstance((doc.get("fingerprint") or {}).get("facts"), dict):
        raise ReuseError(
            f"{path}: no host fingerprint (a decision.json of a tune before fingerprints: "
            "run a full `fastverifyctl tune` on that host again)"
        )
    return doc


def find(source: Path, here: Mapping[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The decision record to reuse: `source` itself, or in a directory the one of this
    fingerprint, else the nearest (fewest differing facts, so the refusal names them)."""
    from fastverify.host import fingerprint

    if source.is_file():
        return source, _load(source)
    if not source.is_dir():
        raise ReuseError(f"{source}: no such decision record or directory")
    exact = source / f"{here['id']}.json"
    if exact.is_file():
        return exact, _load(exact)
    docs = []
    for p in sorted(source.glob("*.json")):
        try:
            docs.append((p, _load(p)))
        except ReuseError:
            continue
    if not docs:
        raise ReuseError(f"{source}: no decision records (*.json with a fingerprint)")
    return min(docs, key=lambda d: len(fingerprint.diff(d[1]["fingerprint"]["facts"],
                                                         here["facts"])))  # fmt: skip


def bench_check(recorded: Mapping[str, Any] | None, row: Mapping[str, Any]) -> dict[str, Any]:
    """The short bench against the winner's recorded interval: passes unless its CI95 lies
    wholly below the recorded CI95 (a point estimate when none was recorded). Neither is
    taken narrower than decide.TIE of its mean on each side: a single window has no interval
    of its own, and repeats that happened to agree (the sim's do) leave a zero-width one,
    against which a 2% dip on a busy machine would read as clearly slower."""
    from fastverify.experiments.tune.decide import TIE

    rec = dict(recorded or {})
    rec_ci = rec.get("ci95") or [rec.get("tokens_per_second")] * 2
    mean = row.get("tokens_per_second_mean")
    ci = row.get("ci95") or [mean, mean]
    if mean is None or rec_ci[0] is None:
        return {"ok": False, "why": "no bench figure or no recorded figure to compare"}
    rec_mean = rec.get("tokens_per_second") or (rec_ci[0] + rec_ci[1]) / 2
    ok = max(ci[1], mean * (1 + TIE)) >= min(rec_ci[0], rec_mean * (1 - TIE))
    how = f"bench {mean:.1f} tok/s (CI95 {ci[0]:.1f}-{ci[1]:.1f}) vs recorded " + (
        f"{rec['tokens_per_second']:.1f} (CI95 {rec_ci[0]:.1f}-{rec_ci[1]:.1f})"
    )
    return {
        "ok": ok,
        "tokens_per_second": mean,
        "ci95": ci,
        "recorded": rec.get("tokens_per_second"),
        "recorded_ci95": rec_ci,
        "ratio": mean / rec["tokens_per_second"] if rec.get("tokens_per_second") else None,
        "why": how + ("" if ok else ": clearly slower than the recorded interval; retune"),
    }


def run(
    client: Any,
    cfg: TuneConfig,
    source: Path,
    on_event: Callable[[Event], None] | None = None,
) -> dict[str, Any]:
    """Reuse the decision at `source` on this host (see the module docstring); returns the
    `--json` document. Raises ReuseError (usage) before anything is touched."""
    from fastverify.experiments.common.lease import LeaseRefused, hold
    from fastverify.experiments.tune.pipeline import TuneBusy

    emit = on_event or (lambda _e: None)
    try:
        with hold(client, "tune", f"reuse {source}; output {cfg.output_dir}") as leased:
            return _run(leased, cfg, source, emit)
    except LeaseRefused as exc:
        raise TuneBusy(f"{exc}; nothing was switched") from None


def _engine_differs(recorded: Any, here: Mapping[str, Any] | None) -> str | None:
    """How the engine stamp of the decision differs from this daemon's engine (kind or
    simulated), else None; a decision without a stamp is judged by its fingerprint alone."""
    if not isinstance(recorded, dict) or not here:
        return None
    keys = ("kind", "simulated")
    if all(recorded.get(k) == here.get(k) for k in keys):
        return None
    return (
        f"the {recorded.get('kind')} engine (simulated: {recorded.get('simulated')}), this host"
        f" serves with the {here.get('kind')} engine (simulated: {here.get('simulated')})"
    )


def _line(emit: Callable[[Event], None], stage: str) -> Callable[[str], None]:
    return lambda text: emit({"event": "line", "stage": stage, "text": text, "eta_s": None})


def _run(client: Any, cfg: TuneConfig, source: Path, emit: Callable[[Event], None]) -> dict:
    from fastverify.experiments.tune import decide, gpu, inventory, journal, measure
    from fastverify.experiments.tune.candidates import candidate_backend
    from fastverify.experiments.tune.pipeline import tune_dir
    from fastverify.host import fingerprint
    from fastverify.profiles.store import ProfileStore

    t0 = time.time()
    status = client.status()
    out = Path(cfg.output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    jr = journal.Journal(tune_dir(status))
    ctx = Ctx(cfg=cfg, client=client, journal=jr, out=out, emit=_line(emit, "inventory"))
    stages: list[dict[str, Any]] = []

    def stage(name: str, fn: Callable[[], StageResult]) -> StageResult:
        emit({"event": "stage", "name": name, "status": "started", "eta_s": None,
              "index": len(stages) + 1, "total": 4})  # fmt: skip
        ctx.stage, ctx.stage_t0 = name, time.monotonic()
        ctx.emit = _line(emit, name)
        res = fn()
        wall = time.monotonic() - ctx.stage_t0
        ctx.results[name] = res
        stages.append({"name": name, "status": res.status, "wall_s": round(wall, 3),
                       "reason": res.reason})  # fmt: skip
        emit({"event": "stage", "name": name, "status": res.status, "wall_s": wall,
              "reason": res.reason, "eta_s": None, "index": len(stages), "total": 4})  # fmt: skip
        return res

    inv = stage("inventory", lambda: inventory.run(ctx))
    here = inv.data["fingerprint"]
    path, doc = find(source, here)
    changes = fingerprint.diff(doc["fingerprint"]["facts"], here["facts"])
    dec = doc["decision"]
    reused_from = {"path": str(path), "fingerprint": doc["fingerprint"]["id"], "decision": dec}
    # which engine measured it: this daemon's account (its check bench runs here), checked
    # against the stamp the decision carries; a simulated decision stays simulated
    engine = (status.get("engine") or {}).get("identity")
    stamp_differs = _engine_differs(dec.get("engine"), engine)

    def finish(decision: dict[str, Any], check: dict[str, Any]) -> dict[str, Any]:
        history = client.history()
        result = {
            "decision": decision,
            "stages": stages,
            "loads": decide.count_loads(history, t0),
            "wall_s": round(time.time() - t0, 3),
            "report": None,
            "plots": {"files": {}, "skipped": "tune --reuse draws no plots"},
            "fingerprint": here,
            "evidence": doc.get("evidence"),
            "reused_from": reused_from,
            "check": check,
        }
        atomic_write_json(out / "decision.json", result, sort_keys=False, mode=0o644)
        return result

    def refuse(why: str, check: Mapping[str, Any] | None = None) -> dict[str, Any]:
        stages.append({"name": "reuse_check", "status": "failed", "wall_s": 0.0, "reason": why})
        emit({"event": "stage", "name": "reuse_check", "status": "failed", "reason": why,
              "eta_s": None, "index": len(stages), "total": 4})  # fmt: skip
        decision = {"profile": dec.get("profile"), "mode": dec.get("mode"),
                    "backend": dec.get("backend"), "applied": False,
                    "why": f"not reused: {why}", "engine": engine}  # fmt: skip
        return finish(decision, {**(check or {}), "ok": False, "why": why})

    if changes:
        return refuse(
            f"this host differs from {path.name} (fingerprint {doc['fingerprint']['id']} there, "
            f"{here['id']} here): {fingerprint.describe(changes)}; run a full tune here",
            {"changes": changes},
        )
    if stamp_differs:
        return refuse(f"{path} was measured by {stamp_differs}: run a full tune here")
    if dec.get("applied") is not True:
        return refuse(f"{path}: tune did not apply {dec.get('profile')}/{dec.get('mode')} on "
                      f"its host ({dec.get('why')}): nothing verified to reuse")  # fmt: skip
    name, mode = dec["profile"], dec["mode"]
    try:
        loaded = ProfileStore().load(name)
    except Exception as exc:  # the profile (a derived tuner, a user file) is not here
        return refuse(f"profile {name} cannot be loaded here ({exc}): copy it from that host")
    ctx.results["candidates"] = StageResult(
        "done", None, {"candidates": [{"name": name, "backend": candidate_backend(loaded)}]}
    )
    pf = stage("preflight", lambda: gpu.preflight(ctx))
    if pf.status == "failed" or (pf.status == "done" and name not in pf.data["survivors"]):
        return refuse(f"preflight of {name}: {pf.reason or 'dropped'}")

    def bench() -> StageResult:
        bench_cfg = (doc.get("evidence") or {}).get("bench") or {}
        keys = ("concurrency", "input_len", "output_len")  # as the winner was measured
        ctx.cfg = replace(cfg, **{k: bench_cfg[k] for k in keys if k in bench_cfg})
        rep = measure.sweep(ctx, "reuse-check", [name], mode=mode, load_format="auto",
                            traces=False)  # fmt: skip
        row = next((r for r in rep["results"] if r["mode"] == mode), None)
        if row is None or row["status"] != "ok":
            why = (row or {}).get("reason") or "no measurement"
            return StageResult("failed", f"bench of {name}/{mode}: {why}", {"row": row})
        check = bench_check(doc.get("evidence"), row)
        return StageResult("done" if check["ok"] else "failed",
                           None if check["ok"] else check["why"], check)  # fmt: skip

    b = stage("bench", bench)
    if b.status != "done":
        return refuse(b.reason or "bench failed", b.data)
    after = client.status()
    applied = (after.get("profile"), after.get("mode")) == (name, mode) and not after.get("trial")
    why = (f"{name}/{mode} reused from {path.name} (fingerprint {here['id']}, identical): "
           f"{b.data['why']}")  # fmt: skip
    body = {"profile": name, "mode": mode, "backend": dec.get("backend"), "applied": applied,
            "why": why[:2000], "tokens_per_second": b.data["tokens_per_second"],
            "report": str(out / "decision.json")}  # fmt: skip
    if dec.get("adaptive_config"):
        body["adaptive_config"] = dec["adaptive_config"]

    def record() -> StageResult:
        from fastverify.client import ApiError

        try:
            client.record_decision(**body)
        except ApiError as exc:
            return StageResult("failed", f"recording the decision: {exc}")
        return StageResult("done" if applied else "failed",
                           None if applied else f"{name}/{mode} is not serving", {})  # fmt: skip

    stage("decide", record)
    decision = {k: dec.get(k) for k in ("profile", "mode", "backend")}
    decision.update(applied=applied, why=why, engine=engine)
    for k in ("adaptive_config", "adaptive_config_json"):
        if k in dec:
            decision[k] = dec[k]
    result = finish(decision, {"ok": True, **b.data})
    cache.store(jr.path.parent, result)
    return result
