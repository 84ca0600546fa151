"""The NCCL tuner plugin as a part of the daemon (parts.py): its verifier (`Loaded`: NCCL
loaded the profile's tuner plugin, tuner_check.py's rule), what one engine start keeps of it
(the plugin's load as NCCL's INFO output confirmed it at verify, under `h.parts["tuner"]`),
and its field of a result and of the engine's status. It has no status section.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastverify.daemon import tuner_check
from fastverify.daemon.launcher import EngineHandle
from fastverify.daemon.parts import BasePart
from fastverify.daemon.verifier import Check, Context, Finding

if TYPE_CHECKING:
    from fastverify.daemon.operations import Operation

PART = "tuner"  # its key on an engine handle, its result and engine field


def confirmed(h: EngineHandle | None) -> dict[str, Any] | None:
    """The tuner load verify confirmed for `h` (None: no tuner profile, not verified yet,
    or no engine)."""
    load: dict[str, Any] | None = h.parts.get(PART) if h is not None else None
    return load


class Loaded(Check):
    """The verifier (verifier.py): after READY, NCCL loaded the profile's tuner plugin."""

    name = "tuner"

    def verify(self, h: EngineHandle, ctx: Context) -> Finding:
        failure, tuner = tuner_check.check_engine_tuner(h.pid, h.nccl_debug_dir, str(h.log_path))
        if failure is not None:
            return self.failed(failure, line=failure.line)
        if tuner is None:
            return self.skipped(f"no tuner table ({tuner_check.TABLE_ENV} unset)")
        ctx.details[PART] = h.parts[PART] = tuner
        message = tuner_check.summary(tuner)
        ctx.say(message)
        return self.ok(message.removeprefix("verify: "), **tuner)


class TunerPart(BasePart):
    """The part (parts.py): what verify confirmed, in a start's result and the engine's
    status."""

    NAME = PART

    def result_fields(self, op: Operation, h: EngineHandle) -> dict[str, Any]:
        return {PART: confirmed(h)}  # what NCCL's INFO output confirmed (None: no tuner)

    def engine_fields(self, h: EngineHandle | None) -> dict[str, Any]:
        return {PART: confirmed(h)}  # confirmed at verify
