"""Verification, 2 of 4 (verifier.py tells the story): the daemon's verifiers, each a
`verifier.Check`, in the order it runs them.

    argv        SGLang's own argument parser refuses the argv (422 argv_rejected)
    forced      SGLANG_SIMULATE_ACC_LEN / _METHOD in the server's environment as SGLang would
                not honour them (422 forced_acceptance_invalid; speculation_part.py)
    p2p         a profile using PCIe P2P where ACS redirects peer traffic (422 p2p_redirected)
    env         /proc/PID/environ of the server and every descendant holds the profile (verify.py)
    nccl        NCCL's own "X set by environment to Y" lines agree (NCCL_DEBUG=INFO starts)
    adaptive    mode adaptive: SGLang kept --speculative-adaptive (speculation_part.py)
    tuner       a tuner profile: NCCL loaded fastverify's plugin (tuner_part.py, tuner_check.py)
    allreduce   the TP all-reduce backend the profile asks for: refused before the load when
                it cannot serve, its SGLang lines read while loading, confirmed per rank
                after READY (allreduce_part.py, the all-reduce part's own verifier)
    profile     on a re-run: the serving engine still runs what its profile, as it is on disk
                now, would start (same NCCL settings, same argv)

`default_checks(launcher, resolver)` builds the list; messages and reasons are the
ones each check has always had.
"""

from __future__ import annotations

from typing import Any

from fastverify.daemon import allreduce_part, speculation_part, tuner_part, verify
from fastverify.daemon.failures import Failure
from fastverify.daemon.launcher import DEBUG_VARS, EngineHandle, Launcher
from fastverify.daemon.resolve import RequestError, Resolver
from fastverify.daemon.verifier import Check, Context, Finding, Plan, Problem, Verifier
from fastverify.profiles import env_policy
from fastverify.redact import mask_argv


class ArgvParser(Check):
    name = "argv"

    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver

    def refuse(self, plan: Plan) -> Problem | None:
        verdict = self.resolver.check_argv(plan.argv)
        if verdict.ok is not False:
            return None
        return Problem(
            422,
            f"argv rejected for {plan.name}/{plan.mode}: {verdict.message}",
            {"argv": mask_argv(plan.argv), "reason": "argv_rejected"},
        )


class DirectP2P(Check):
    name = "p2p"

    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver

    def refuse(self, plan: Plan) -> Problem | None:
        if plan.force:
            return None
        try:
            self.resolver.require_direct_p2p(plan.profile)
        except RequestError as exc:
            return Problem.of(exc)
        return None


def _rules(launcher: Launcher, h: EngineHandle) -> Any:
    """What the engine adds to its workers' NCCL environment by its own rules (None: none)."""
    return launcher.engine.engine_env(h.argv, h.expected_nccl)


class ProcessEnv(Check):
    name = "env"

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher  # its engine: the one a SIGHUP put in place

    def refuse(self, plan: Plan) -> Problem | None:
        """An environment the kernel would refuse at exec (E2BIG) is refused before anything
        is stopped: each value and the whole (with the argv) within env_policy's bounds."""
        env = self.launcher.engine_env(plan.profile, "-", None)
        why = env_policy.environment_problem(env, plan.argv)
        if why is None:
            return None
        return Problem(
            422,
            f"{why}; {plan.kind} to {plan.name}/{plan.mode} refused, nothing was stopped or "
            "changed",
            {"reason": "env_refused"},
        )

    def verify(self, h: EngineHandle, ctx: Context) -> Finding:
        rules = _rules(self.launcher, h)
        h.engine_env = rules.to_dict() if rules is not None else None
        expected = {**h.expected_nccl, **h.expected_sglang}
        report = verify.check_process_env(
            h.pid,
            expected,
            self.launcher.engine.engine_owned_nccl,
            engine_env=rules,
            composed=h.env_names,
        )
        ctx.details["env"] = report.to_dict()
        if h.engine_env is not None:
            ctx.details["engine_env"] = h.engine_env
        ctx.say(f"verify: {report.message}", stream=False)  # the `verify` event carries it
        evidence = {"expected": expected, "processes": ctx.details["env"]["processes"]}
        if not report.ok:
            reason = report.reason or "env_mismatch"
            return self.failed(Failure(reason, report.message, log=str(h.log_path)), **evidence)
        return self.ok(report.message, **evidence)


class NcclConfirmed(Check):
    name = "nccl"

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher  # its engine: the one a SIGHUP put in place

    def verify(self, h: EngineHandle, ctx: Context) -> Finding:
        if h.nccl_debug_dir is None:
            return self.skipped("started without NCCL_DEBUG=INFO (daemon.nccl_debug off)")
        nccl = verify.check_nccl_debug(
            sorted(h.nccl_debug_dir.glob("*")), h.expected_nccl, engine_env=_rules(self.launcher, h)
        )
        ctx.details["nccl"] = nccl
        keys = ("files", "confirmed", "mismatched", "overridden", "engine_added", "not_in_profile")
        evidence = {k: nccl[k] for k in keys}
        if nccl["ok"] is False:
            bad = {**nccl["mismatched"], **nccl.get("overridden", {})}
            diffs = "; ".join(f"{k}={got} (profile: {want})" for k, (want, got) in bad.items())
            reason = nccl.get("reason") or "env_mismatch"
            failure = Failure(reason, f"NCCL reports {diffs}", log=str(h.log_path))
            return self.failed(failure, **evidence)
        if nccl["ok"] is None:
            ctx.say("verify: NCCL printed no 'set by environment' lines (yet)")
            return self.skipped("NCCL printed no 'set by environment' lines (yet)", **evidence)
        message = f"NCCL confirms {len(nccl['confirmed'])} variable(s)"
        ctx.say(f"verify: {message}")
        return self.ok(message, **evidence)


class ProfileCurrent(Check):
    """On a re-run: the profile as it is on disk now would start what serves."""

    name = "profile"

    def __init__(self, launcher: Launcher, resolver: Resolver) -> None:
        self.launcher = launcher
        self.resolver = resolver

    def verify(self, h: EngineHandle, ctx: Context) -> Finding | None:
        if not ctx.rerun:
            return None  # a start: the engine was built from the profile just now
        try:
            profile, argv = self.resolver.resolve(h.profile, h.mode)
        except RequestError as exc:
            failure = Failure("invalid_profile", f"profile {h.profile} no longer loads: {exc}")
            return self.failed(failure)
        now = self.launcher.settings(profile)
        running = {k: v for k, v in h.expected_nccl.items() if k not in DEBUG_VARS}
        different = {
            k: [now.get(k), running.get(k)]
            for k in sorted(now.keys() | running.keys())
            if now.get(k) != running.get(k)
        }
        evidence: dict[str, Any] = {"profile": h.profile, "different": different}
        if different:
            diffs = "; ".join(
                f"{k}={got if got is not None else '(unset)'} "
                f"(profile now: {want if want is not None else '(unset)'})"
                for k, (want, got) in different.items()
            )
            failure = Failure(
                "profile_drift",
                f"the engine runs {diffs}: profile {h.profile} changed since it started "
                f"(`fastverifyctl restart` starts it as it is now)",
                log=str(h.log_path),
            )
            return self.failed(failure, **evidence)
        if not self.launcher.same_engine(h, profile, argv):
            failure = Failure(
                "profile_drift",
                f"the engine's argv is not the one {h.profile}/{h.mode} builds now "
                "(`fastverifyctl restart` starts it as it is now)",
                log=str(h.log_path),
            )
            return self.failed(failure, argv_now=mask_argv(argv), **evidence)
        return self.ok(f"{h.profile}/{h.mode} would start the same engine now", **evidence)


def default_checks(launcher: Launcher, resolver: Resolver) -> list[Verifier]:
    """The daemon's verifiers, in the order they run (see the module docstring)."""
    return [
        ArgvParser(resolver),
        speculation_part.ForcedAcceptance(launcher),
        DirectP2P(resolver),
        ProcessEnv(launcher),
        NcclConfirmed(launcher),
        speculation_part.Kept(),
        tuner_part.Loaded(),
        allreduce_part.Backend(launcher),
        ProfileCurrent(launcher, resolver),
    ]
