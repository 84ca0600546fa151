"""Where the front door and the engine listen: with `[frontdoor] mode` other than "off" the
engine moves to the internal port on the loopback (only the front door and fastverifyd reach
it) and the front door takes `[server] host` and `port`."""

from __future__ import annotations

import dataclasses

from fastverify.config import Config


def enabled(cfg: Config) -> bool:
    return cfg.frontdoor.mode != "off"


def engine_side(cfg: Config) -> Config:
    """`cfg` as fastverifyd's engine side sees it: `server.host`/`port` the engine's loopback
    address and internal port, `server.public_host`/`public_port` the front door's
    (unchanged when the front door is off, or when `cfg` was already moved)."""
    if not enabled(cfg) or cfg.server.public_port is not None:
        return cfg
    public = cfg.server.port
    inner = cfg.frontdoor.engine_port or public + 1
    server = dataclasses.replace(
        cfg.server, host="127.0.0.1", port=inner, public_host=cfg.server.host, public_port=public
    )
    return dataclasses.replace(cfg, server=server)


def public_url(cfg: Config) -> str:
    """The URL clients use: the front door's when it is on, else the engine's."""
    host = cfg.server.public_host or cfg.server.host
    return f"http://{host}:{cfg.server.public_port or cfg.server.port}"
