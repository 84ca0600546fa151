"""Request body validation of the control API."""

from __future__ import annotations

import pytest

from fastverify import api_models
from fastverify.daemon.api_requests import MIRRORS, validate_body
from fastverify.daemon.resolve import RequestError


def _post(path: str) -> api_models.Endpoint[object]:
    ep = api_models.endpoint("POST", path)
    assert ep is not None, path
    return ep


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/v1/profile", [], 400, "JSON object"),
        ("/v1/profile", {}, 422, "missing field 'name'"),
        ("/v1/profile", {"name": True}, 422, "'name' must be str"),
        ("/v1/profile", {"name": "a", "force": 1}, 422, "'force' must be bool"),
        ("/v1/profile", {"name": "a", "timeout_s": "5"}, 422, "'timeout_s' must be"),
        ("/v1/profile", {"name": "a", "timeout_s": True}, 422, "'timeout_s' must be"),
        ("/v1/profile", {"name": "a", "timeout_s": -1}, 422, "> 0"),
        ("/v1/profile", {"name": "a", "nam": "b"}, 422, "unknown field(s) nam"),
        ("/v1/mode", {"mode": None}, 422, "missing field 'mode'"),
        ("/v1/baselines", {"profile": "a", "tokens_per_second": 1}, 422, "per_request"),
        ("/v1/trace/capture", {"steps": 2.5}, 422, "'steps' must be int"),
    ],
)
def test_rejects(path: str, body: object, status: int, words: str) -> None:
    with pytest.raises(RequestError) as exc:
        validate_body(_post(path), body)
    assert exc.value.status == status
    assert words in exc.value.body["error"]


def test_accepts() -> None:
    body = {"name": "ring-ll", "mode": "eagle3", "wait": False, "stream": True, "timeout_s": 2}
    assert validate_body(api_models.SET_PROFILE, body) == body
    assert validate_body(api_models.RESTART, None) == {}


def test_every_post_route_has_a_model() -> None:
    for path, methods in api_models.ROUTES.items():
        if "POST" in methods:
            assert api_models.endpoint("POST", path) is not None, path


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ("/v1/profile", "timeout_s", -1),
        ("/v1/profile", "timeout_s", 0),
        ("/v1/restart", "timeout_s", 0.0),
        ("/v1/mode", "mode", "turbo"),
        ("/v1/trace/capture", "steps", 0),
        ("/v1/trace/capture", "steps", 1001),
    ],
)
def test_fields_that_mirror_config_keys_get_the_config_files_verdict(
    path: str, field: str, value: object
) -> None:
    from fastverify import config

    body = {"name": "a"} if path == "/v1/profile" else {"mode": "baseline"}
    body = {**(body if path in ("/v1/profile", "/v1/mode") else {}), field: value}
    with pytest.raises(RequestError) as err:
        validate_body(_post(path), body)
    assert err.value.status == 422
    # the same words as a configuration file with that value would get
    (problem,) = config.validate_fields({MIRRORS[field]: value})
    assert problem.message.partition(": ")[2] in err.value.body["error"]
    assert repr(field) in err.value.body["error"]
