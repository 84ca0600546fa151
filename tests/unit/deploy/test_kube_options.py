"""`render kubernetes`' options are declared once (`KubeOptions`): every field is an option
of the command with the field's default, and what the command line gives comes back as
`KubeOptions` (a repeatable option given nothing keeps its field's default)."""

from __future__ import annotations

import dataclasses

import click

from fastverify.cli.render_cmd import kubernetes_cmd
from fastverify.config import MODES
from fastverify.deploy.kubernetes.options import KubeOptions
from fastverify.flags import flag_name, flag_of


def params() -> dict[str, click.Option]:
    return {p.name: p for p in kubernetes_cmd.params if isinstance(p, click.Option)}


def test_every_field_is_an_option_with_its_default() -> None:
    by_name = params()
    fields = dataclasses.fields(KubeOptions)
    assert {f.name for f in fields} == set(by_name) - {"output_dir", "as_json"}
    for f in fields:
        opt = by_name[f.name]
        assert flag_name(f) in opt.opts, (f.name, opt.opts)
        assert (opt.help or "") == flag_of(f).help, f.name
        if flag_of(f).multiple:
            assert opt.multiple, f.name
        else:
            assert opt.default == f.default, f.name
    assert list(by_name["mode"].type.choices) == list(MODES)
    assert by_name["gpus_per_node"].type.min == 1 and by_name["gpus_per_node"].type.max == 64
    assert by_name["grafana"].opts == ["--no-grafana"] and by_name["grafana"].flag_value is False


def test_the_command_line_comes_back_as_options() -> None:
    ctx = kubernetes_cmd.make_context(
        "kubernetes",
        ["--output-dir", "out", "--image", "r/i:1", "--nodes", "2", "--rdma", "rdma/ib=1",
         "--no-grafana", "--force", "--profile-dir", "a", "--profile-dir", "b"],
    )  # fmt: skip
    given = {k: v for k, v in ctx.params.items() if k not in ("output_dir", "as_json")}
    opts = KubeOptions.from_flags(**given)
    assert opts == KubeOptions(
        image="r/i:1", nodes=2, rdma=("rdma/ib=1",), grafana=False, force=True,
        profile_dirs=("a", "b"),
    )  # fmt: skip
    assert opts.monitor_labels is None and opts.tolerations == ()
