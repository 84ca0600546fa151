"""Is the engine's HTTP port free? Checked before every launch.

SGLang binds its HTTP port only after the model has loaded (uvicorn starts last), so a port
another process holds fails a start minutes in, and every retry loads the model again. The
daemon asks first: `port_owner(host, port)` binds the address as the server would
(SO_REUSEADDR, as uvicorn sets it: only a live listener conflicts) and, when that fails,
names the listening process (`pid N (comm)`, psutil; "another process" when this user may
not see it). `in_use_message` is the failure's text, with the fix.
"""

from __future__ import annotations

import contextlib
import errno
import socket


def port_owner(host: str, port: int) -> str | None:
    """None when `host:port` can be bound now; else who holds it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return None  # not ours to judge (e.g. an address of another host): let it try
        else:
            return None
    return _listener(port) or "another process"


def _listener(port: int) -> str | None:
    import psutil

    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                if conn.pid is None:
                    return None
                try:
                    name = psutil.Process(conn.pid).name()
                except psutil.Error:
                    return f"pid {conn.pid}"
                return f"pid {conn.pid} ({name})"
    return None


def in_use_message(host: str, port: int, owner: str) -> str:
    return (
        f"port {port} ({host}) is in use by {owner}: set [server] port (or fastverifyd "
        "--server-port) to a free port, or stop that process; nothing was loaded"
    )
