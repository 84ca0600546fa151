"""Each endpoint's JSON answer, from a real daemon on the sim, has exactly the keys its
answer model in fastverify.api_answers declares: every required key, and no key the model
does not declare (nested models too), for the main endpoints and their errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args, get_origin

import pytest

from fastverify import api_answers as a
from fastverify import api_models as m
from fastverify.api_base import is_model
from fastverify.api_schema import field_types
from fastverify.client import ApiError
from tests.support.harness import DaemonHarness


def mismatches(value: Any, tp: Any, where: str = "") -> list[str]:
    """What in `value` its declared type `tp` does not allow: a missing required key, an
    undeclared one (through nested models, lists and dicts of them)."""
    if is_model(tp):
        if not isinstance(value, dict):
            return [f"{where or 'answer'}: {type(value).__name__}, not an object"]
        declared = dict(field_types(tp))
        out = [f"{where}.{k}: missing" for k in sorted(tp.__required_keys__ - set(value))]
        out += [f"{where}.{k}: not declared" for k in sorted(set(value) - set(declared))]
        for k in set(value) & set(declared):
            out += mismatches(value[k], declared[k], f"{where}.{k}")
        return out
    args = get_args(tp)
    if value is None or not args:
        return []
    if get_origin(tp) is list and isinstance(value, list):
        return [e for i, v in enumerate(value) for e in mismatches(v, args[0], f"{where}[{i}]")]
    if get_origin(tp) is dict and isinstance(value, dict):
        return [e for k, v in value.items() for e in mismatches(v, args[1], f"{where}[{k}]")]
    models = [t for t in args if is_model(t)]  # a union: the model it is (objects only)
    return mismatches(value, models[0], where) if models and isinstance(value, dict) else []


def test_the_check_sees_a_missing_and_an_undeclared_key() -> None:
    served = {"profile": "p", "mode": "baseline"}
    assert mismatches(served, a.Served) == []
    assert mismatches({"profile": "p"}, a.Served) == [".mode: missing"]
    assert mismatches({**served, "x": 1}, a.Served) == [".x: not declared"]
    cancelled = {"result": "cancelled", "operation": {"id": "1"}}
    assert ".operation.kind: missing" in mismatches(cancelled, a.Cancelled)


def error_of(call: Any) -> dict[str, Any]:
    with pytest.raises(ApiError) as exc:
        call()
    return exc.value.body


def test_every_main_answer_is_its_model(tmp_path: Path) -> None:
    cfg = {"server": {"mode": "eagle3", "extra_args": ["--sim-accept-length", "3.2"]}}
    (tmp_path / "profiles").mkdir(parents=True, exist_ok=True)
    answers: list[tuple[Any, Any]] = []  # (endpoint or model, answer)
    with DaemonHarness(tmp_path, config=cfg, metrics=False) as d:
        c = d.client
        profile = c.status()["profile"]
        answers.append((m.STATUS, c.status()))
        answers.append((m.PROFILES, c.profiles()))
        answers.append((m.SET_PROFILE, c.set_profile(profile, mode="eagle3", restart=True)))
        answers.append((m.SET_PROFILE, c.set_profile(profile, mode="eagle3")))  # unchanged
        failed = error_of(lambda: c.set_profile("tree-ll"))  # rolled back: 502, the result
        answers.append((m.SET_PROFILE, failed))
        assert failed["result"] == "rolled_back" and "rolled_back_to" in failed
        answers.append((a.Accepted, c.post("/v1/restart", {"wait": False})))
        answers.append((m.RESTART, c.restart(queue=True)))
        answers.append((a.ApiError, error_of(lambda: c.call(m.CANCEL))))  # 404
        answers.append((m.HISTORY, c.history()))
        answers.append((m.SERVER_ARGV, c.server_argv(check=True)))
        answers.append((m.RECORD_BASELINE, c.record_baseline(
            profile=profile, tokens_per_second=80.0, per_request_tokens_per_second=80.0,
            concurrency=1)))  # fmt: skip
        answers.append((m.BASELINES, c.baselines()))
        bad = error_of(lambda: c.record_baseline(profile="nope", tokens_per_second=-1.0,
                                                 per_request_tokens_per_second=1.0,
                                                 concurrency=1))  # fmt: skip
        assert bad["reason"] == "invalid_baseline" and bad["fields"]
        answers.append((a.ApiError, bad))
        answers.append(
            (
                m.RECORD_DECISION,
                c.record_decision(
                    profile=profile, mode="eagle3", backend="nccl", applied=True, why="test"
                ),
            )
        )
        answers.append((m.DECISION, c.decision()))
        answers.append((m.LEASE, c.lease()))
        lease = c.take_lease("sweep", description="answers")
        answers.append((m.TAKE_LEASE, lease))
        answers.append((m.LEASE, c.lease()))
        answers.append((a.ApiError, error_of(lambda: c.take_lease("tune"))))  # 409 leased
        answers.append((m.RELEASE_LEASE, c.release_lease(lease["id"])))
        answers.append((m.VERIFY, c.verify(timeout=60)))
        answers.append((m.RECORD_ACCEPTANCE, c.record_acceptance(histogram=[1, 2, 3, 4])))
        answers.append((m.ACCEPTANCE, c.acceptance()))
        events = list(c.logs(n=3))
        answers += [(m.LOGS, e) for e in events]
    seen = {(ep.method, ep.path) for ep, _ in answers if isinstance(ep, m.Endpoint)}
    assert len(events) == 3 and len(seen) == 17
    problems = []
    for ep, answer in answers:
        tp = ep.answer if isinstance(ep, m.Endpoint) else ep
        if ep is m.STATUS:  # the parts' sections: declared by the parts (test_daemon_api)
            answer = {k: v for k, v in answer.items() if k not in answer["parts"]}
        problems += [f"{getattr(ep, 'path', tp.__name__)}{p}" for p in mismatches(answer, tp)]
    assert problems == []
