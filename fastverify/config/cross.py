"""Checks that span several configuration keys: a TCP door that would be unsafe, a weight
cache fastverifyd cannot own, a multi-node layout that cannot start, a front door on the
engine's own port. Values come keyed by key (`api.tcp_listen`) or old name
(`daemon.tcp_listen`); each problem is (the key to blame, why)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastverify.config.keys import by_key


def _loopback(host: str) -> bool:
    import ipaddress

    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name may resolve anywhere


def tcp_problems(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, why) for a TCP door that would be unsafe or cannot work: no way to
    authenticate, plaintext off loopback, half a TLS setting. `values` may use keys or their
    old names."""
    flat = by_key(values)
    out = []
    listen, token = flat.get("api.tcp_listen") or "", flat.get("api.token_file")
    cert, key, ca = (flat.get(f"api.tls_{k}") for k in ("cert", "key", "client_ca"))
    if listen and not token and not ca:
        out.append(("api.tcp_listen", "api.tcp_listen is set but api.token_file is "
                    "empty (expected a token_file, or tls_client_ca for client certificates: "
                    "TCP control needs a token or a certificate)"))  # fmt: skip
    if listen and not (cert and key) and not _loopback(listen.rpartition(":")[0] or listen):
        out.append(("api.tcp_listen", f"api.tcp_listen = {listen!r} is not a loopback "
                    "address and TLS is off: plaintext would carry the token in the clear; "
                    "set api.tls_cert and api.tls_key (fastverifyd --tls-cert FILE "
                    "--tls-key FILE), or listen on 127.0.0.1"))  # fmt: skip
    if bool(cert) != bool(key):
        have, lack = ("tls_cert", "tls_key") if cert else ("tls_key", "tls_cert")
        out.append((f"api.{have}", f"api.{have} is set but api.{lack} is empty "
                    "(expected both: a certificate and its private key)"))  # fmt: skip
    if ca and not cert:
        out.append(("api.tls_client_ca", "api.tls_client_ca is set but api.tls_cert "
                    "is empty (client certificates need the TLS door: set tls_cert and "
                    "tls_key)"))  # fmt: skip
    if (cert or key) and not listen:
        name = "tls_cert" if cert else "tls_key"
        out.append((f"api.{name}", f"api.{name} is set but api.tcp_listen is empty (TLS "
                    "is for the TCP door; set tcp_listen)"))  # fmt: skip
    return out


def weight_cache_problems(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, why) for a weight cache fastverifyd cannot own: the argv already
    manages SGLang's cache (server.extra_args), or `on` over several nodes."""
    flat = by_key(values)
    setting = flat.get("server.weight_cache", "off")
    if setting == "off":
        return []
    out = []
    extra = flat.get("server.extra_args") or []
    own = sorted({a.partition("=")[0] for a in extra if isinstance(a, str)
                  and a.startswith("--weight-cache-")})  # fmt: skip
    if own:
        out.append(("server.weight_cache", f"server.weight_cache = {setting!r} and "
                    f"server.extra_args sets {', '.join(own)}: fastverifyd passes the weight-cache "
                    "flags itself (expected one of them: drop the flags, or weight_cache = "
                    '"off" to manage the cache yourself)'))  # fmt: skip
    nnodes = flat.get("server.nnodes", 1)
    if setting == "on" and isinstance(nnodes, int) and nnodes > 1:
        out.append(("server.weight_cache", f'server.weight_cache = "on" with server.nnodes = '
                    f"{nnodes}: fastverifyd runs the weight cache on one node (expected "
                    '"auto", which loads from disk there, or "off")'))  # fmt: skip
    return out


def multinode_problems(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, why) for a multi-node layout that cannot start."""
    flat = by_key(values)
    out = []
    nnodes = flat.get("server.nnodes", 1)
    rank = flat.get("server.node_rank", 0)
    if isinstance(nnodes, int) and isinstance(rank, int) and not isinstance(rank, bool):
        if rank >= nnodes:
            out.append(("server.node_rank", f"server.node_rank = {rank} with server.nnodes = "
                        f"{nnodes} (expected a rank in 0..{nnodes - 1})"))  # fmt: skip
        if nnodes > 1 and not flat.get("server.dist_init_addr"):
            out.append(("server.nnodes", f"server.nnodes = {nnodes} but server.dist_init_addr "
                        'is empty (expected "HOST:PORT" of node 0, e.g. fastverifyd '
                        "--dist-init-addr)"))  # fmt: skip
    return out


def frontdoor_problems(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, why) for a front door whose engine port is the public one, or a standby port
    that is either of them."""
    flat = by_key(values)
    if flat.get("frontdoor.mode", "off") == "off":
        return []
    port, inner = flat.get("server.port", 30000), flat.get("frontdoor.engine_port", 0)
    if isinstance(port, int) and inner == port:
        return [("frontdoor.engine_port", f"frontdoor.engine_port = {inner} is "
                 "server.port, where the front door listens (expected another port, or 0 for "
                 "server.port + 1)")]  # fmt: skip
    if isinstance(port, int) and inner == 0 and port == 65535:
        return [("frontdoor.engine_port", "server.port = 65535 leaves no port + 1 for "
                 "the engine (expected frontdoor.engine_port set)")]  # fmt: skip
    if flat.get("frontdoor.mode") != "standby" or not isinstance(port, int):
        return []
    engine = inner or port + 1
    standby = flat.get("frontdoor.standby_port", 0) or engine + 1
    if standby in (port, engine):
        return [("frontdoor.standby_port", f"frontdoor.standby_port = {standby} is "
                 f"{'server.port' if standby == port else 'the engine port'}: the standby "
                 "engine needs a port of its own (expected another port, or 0 for the engine "
                 "port + 1)")]  # fmt: skip
    if standby > 65535:
        return [("frontdoor.standby_port", f"the engine port {engine} leaves no port + 1 "
                 "for a standby engine (expected frontdoor.standby_port set)")]  # fmt: skip
    return []


def cross_problems(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every check above: (the key to blame, why)."""
    return (
        tcp_problems(values)
        + weight_cache_problems(values)
        + multinode_problems(values)
        + frontdoor_problems(values)
    )
