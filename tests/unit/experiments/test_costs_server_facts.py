"""What a cost file keeps of the server it measured, read from SGLang 0.5.17's own
/server_info (H100, the 8B shape): the prompt limit, and the decode batch sizes a
speculative server captures, which the plan's adaptive controller routes by."""

import json
from pathlib import Path

from fastverify.experiments.engine_costs.run import _keep_capture_list, server_facts

FIXTURES = Path(__file__).parents[2] / "fixtures"
EAGLE3 = FIXTURES / "sglang-0.5.17-h100-spec8b/server_info-eagle3.json"
BASELINE = FIXTURES / "sglang-0.5.17-h100-spec8b-in1024/server_info.json"


def test_a_speculative_servers_capture_list_is_read_from_sglang() -> None:
    facts = server_facts(json.loads(EAGLE3.read_text()))
    # 1-8, then every second size up to max running requests (server_args.py,
    # _generate_decode_cuda_graph_batch_sizes, the speculative branch)
    assert facts["cuda_graph_bs"] == [*range(1, 9), *range(10, 33, 2)]
    assert facts["max_req_input_len"] == 8186
    assert facts["version"] == "0.5.17"


def test_a_baseline_servers_capture_list_prices_no_eagle_pass() -> None:
    info = json.loads(BASELINE.read_text())
    assert info["cuda_graph_config"]["decode"]["bs"] == [1, 2, 4, 8, 12, 16, 24, 32]
    assert server_facts(info)["cuda_graph_bs"] is None


def test_no_server_info_gives_no_facts() -> None:
    assert set(server_facts(None).values()) == {None}


def test_a_baseline_servers_facts_keep_the_speculative_list_already_known() -> None:
    """A resumed run reads its baseline server again; the cost file keeps the EAGLE-3
    server's list the journal holds, and a speculative server's own list wins."""
    eagle = server_facts(json.loads(EAGLE3.read_text()))
    base = server_facts(json.loads(BASELINE.read_text()))
    assert _keep_capture_list(base, eagle)["cuda_graph_bs"] == eagle["cuda_graph_bs"]
    assert _keep_capture_list(eagle, {"cuda_graph_bs": [1, 2]}) == eagle
    assert _keep_capture_list(base, None) == base


def test_the_batch_point_is_sized_by_sglangs_chunked_prefill_budget() -> None:
    """SGLang 0.5.17 reports its chunked_prefill_size (8192 on an 80+ GB GPU) in /server_info:
    the batch prefill point holds that over the prompt, at most max_running_requests (32) and
    the largest batch size measured."""
    from types import SimpleNamespace

    from fastverify.experiments.engine_costs.run import CostTrials

    facts = server_facts(json.loads(BASELINE.read_text()))
    assert facts["chunked_prefill_size"] == 8192 and facts["max_running_requests"] == 32
    trials = CostTrials.__new__(CostTrials)
    trials.info = {"server": facts}
    for input_len, sizes, want in ((1024, (1, 32), 8), (128, (1, 32), 32), (128, (1, 4), 4)):
        trials.cfg = SimpleNamespace(input_len=input_len, batch_sizes=sizes)
        assert trials._batch_prompts() == want, (input_len, sizes)
