"""The front door's control socket: a Unix socket (mode 0600, local only), one JSON object
per line each way. fastverifyd sends `hold`, `drain` (with `timeout_s`), `serve` (with
`port`: cut over and let the held requests go), `take_cuts` (a standby switch's cuts, once
the stopped engine's requests (`port`) have ended, up to `timeout_s`) and `status`; `call` is
its client.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path
from typing import Any

from fastverify.frontdoor.gate import Gate

OPS = ("status", "hold", "drain", "serve", "take_cuts")


async def answer(gate: Gate, message: dict[str, Any]) -> dict[str, Any]:
    op = message.get("op")
    if op == "hold":
        gate.hold()
        return gate.status()
    if op in ("drain", "take_cuts"):
        only = message.get("port")  # a standby cut-over drains the old engine's port only
        timeout = float(message.get("timeout_s", 0))
        drained = await gate.drain(timeout, only if isinstance(only, int) else None)
        if op == "drain":
            return drained
        # the stopped engine's requests have ended (each counted): its cuts are all in
        return {**gate.take_cuts(), "drained": drained["drained"]}
    if op == "serve":
        port = message.get("port")
        if not isinstance(port, int) or not 0 < port < 65536:
            return {"error": f"serve needs an integer port, got {port!r}"}
        episode = gate.serve(port)
        return {**gate.status(), "episode": episode}
    if op == "status":
        return gate.status()
    return {"error": f"unknown op {op!r}: expected one of {', '.join(OPS)}"}


async def serve_control(gate: Gate, path: Path) -> asyncio.AbstractServer:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    reply = await answer(gate, json.loads(line))
                except (ValueError, TypeError) as exc:
                    reply = {"error": f"bad control message: {exc}"}
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_socket():
        path.unlink()
    old = os.umask(0o177)
    try:
        return await asyncio.start_unix_server(handle, path=str(path))
    finally:
        os.umask(old)


def call(path: Path, op: str, wait_s: float = 5.0, **fields: Any) -> dict[str, Any]:
    """One control request (blocking); raises OSError when the front door does not answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(wait_s)
        s.connect(str(path))
        s.sendall(json.dumps({"op": op, **fields}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("the front door closed the control connection")
            data += chunk
    return json.loads(data)
