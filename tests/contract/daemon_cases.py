"""The argvs the daemon builds for an SGLang release (tests/contract/: every one runs through
that release's own parser and hooks in probe.py)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from fastverify.config import Eagle3Params, ServerConfig
from fastverify.engines.sglang import SGLangEngine
from fastverify.profiles.store import ProfileStore
from fastverify.sglang.facts import resolve
from fastverify.sglang.launch import LaunchArgs, Speculative
from fastverify.sglang.versions import PINNED_VERSION

MODEL = "/models/kimi"
DRAFT = "/models/kimi-eagle3"
SHIPPED = Path(__file__).resolve().parents[2] / "profiles"


@functools.cache
def daemon_argvs(version: str = PINNED_VERSION) -> tuple[dict[str, Any], ...]:
    """Every argv the daemon can build from the shipped profiles (both modes, TP 1 and 2)
    in `version`'s flag generation, each with the profile's env, plus the scenarios the env
    rules distinguish. A scenario whose flags `version`'s facts lack is marked `lacks` (the
    test asserts the release's parser refuses it)."""
    facts = resolve(version)
    gen = facts.flag_generation
    store = ProfileStore(user_dirs=[], shipped_dir=SHIPPED)
    eng = SGLangEngine("python-not-used", flags=gen)
    cases = []
    for profile in store.list():
        for mode in ("baseline", "eagle3"):
            for tp in (1, 2):
                server = ServerConfig(
                    model_path=MODEL, draft_model_path=DRAFT, tp_size=tp,
                    eagle3=Eagle3Params(3, 1, 4), sglang_flags=gen,
                )  # fmt: skip
                argv = eng.build_argv(server, mode, profile.requires)[3:]
                env = {k: v for k, v in profile.env.items() if k.startswith("NCCL_")}
                cases.append({"name": f"{profile.name}/{mode}/tp{tp}", "argv": argv, "env": env,
                              "requires": dict(profile.requires)})  # fmt: skip
            trial = ServerConfig(
                model_path=MODEL, draft_model_path=DRAFT, tp_size=2,
                eagle3=Eagle3Params(3, 1, 4), sglang_flags=gen, load_format="dummy",
            )  # fmt: skip
            cases.append({"name": f"{profile.name}/{mode}/trial",
                          "argv": eng.build_argv(trial, mode, profile.requires)[3:],
                          "env": {}})  # fmt: skip
    for k in (1, 2):  # `spec costs`' timing trials at k steps (topk 1, k + 1 draft tokens)
        steps = ServerConfig(
            model_path=MODEL, draft_model_path=DRAFT, tp_size=2, eagle3=Eagle3Params(3, 1, 4),
            sglang_flags=gen, load_format="dummy", steps_override=k,
        )  # fmt: skip
        cases.append({"name": f"trial-steps-{k}", "env": {},
                      "argv": eng.build_argv(steps, "eagle3", {})[3:]})  # fmt: skip
    base = LaunchArgs(model_path=MODEL, tp_size=2)
    other = "old" if gen == "new" else "new"
    extra = {
        "graph-register-1": (base, {"NCCL_GRAPH_REGISTER": "1"}),
        "profile-sets-cumem-nvls": (base, {"NCCL_CUMEM_ENABLE": "1", "NCCL_NVLS_ENABLE": "1",
                                           "NCCL_ALGO": "Ring"}),
        "nvls-flag-over-profile": (base.with_(extra_args=("--enable-nccl-nvls",)),
                                   {"NCCL_NVLS_ENABLE": "0"}),
        "symm-mem": (base.with_(extra_args=("--enable-symm-mem",)), {"NCCL_CUMEM_ENABLE": "0"}),
        "dcp-2": (base.with_(extra_args=("--dcp-size", "2")), {}),
        "tp1-graphs-on": (base.with_(tp_size=1), {}),
        "decode-only-off": (base.with_(extra_args=("--cuda-graph-backend-decode", "disabled")),
                            {}),
        "load-format-dummy": (base.with_(load_format="dummy"), {"NCCL_ALGO": "Ring"}),
        "ep-2-tp-1": (base.with_(tp_size=1, extra_args=("--ep-size", "2")), {}),
        "adaptive": (base.with_(speculative=Speculative(DRAFT, 3, 1, 4),
                                extra_args=("--speculative-adaptive",)), {}),
    }  # fmt: skip
    if "tp_lm_head_all_to_all" in (facts.features.get("graph_register_triggers") or []):
        extra["tp-lm-head-all-to-all"] = (
            base.with_(
                extra_args=(
                    "--dp-size",
                    "2",
                    "--enable-dp-attention",
                    "--enable-tp-lm-head-all-to-all",
                    "--chunked-prefill-size",
                    "8192",
                )
            ),
            {},
        )
    for name, (args, env) in extra.items():
        cases.append({"name": name, "argv": args.to_argv(gen), "env": env})
    cases.append({"name": f"{other}-generation-off",
                  "argv": base.with_(cuda_graph=False).to_argv(other), "env": {}})  # fmt: skip
    if gen == "new":
        cases.append({"name": "ambiguous", "env": {},
                      "argv": [*base.to_argv(gen), "--cuda-graph-max-bs", "8"]})  # fmt: skip
    for case in cases:
        lacks = [a for a in case["argv"] if a.startswith("--") and not facts.has_flag(a)]
        if lacks and case["name"] != "ambiguous":
            case["lacks"] = lacks
    return tuple(cases)
