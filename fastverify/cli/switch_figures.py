"""How a switch looked to clients (its result's `switch`: the front door's mode, downtime,
requests held and their longest wait, cut and refused), as `profile set`, `restart` and
`history` print it."""

from __future__ import annotations

from typing import Any


def _n(value: Any) -> str:
    return "?" if value is None else str(value)


def clients_line(result: dict[str, Any]) -> str | None:
    """`clients: hold, 3.21 s down (held 12, longest 3.19 s), 0 cut, 0 refused`; a standby
    switch: `clients: standby, 0.00 s down (held 0, ...)`, and when its engine failed, that
    the old one served on; a standby-mode switch that held: why."""
    sw = result.get("switch")
    if not sw:
        return None
    down = sw.get("downtime_s")
    text = f"clients: {sw.get('mode')}, " + ("downtime ?" if down is None else f"{down:.2f} s down")
    if sw.get("mode") == "none":
        return text + " (no front door: requests in that window failed; [frontdoor] mode)"
    text += f" (held {sw.get('held', 0)}, longest {sw.get('longest_wait_s', 0.0):.2f} s)"
    text += f", {_n(sw.get('cut'))} cut, {_n(sw.get('refused'))} refused"
    if sw.get("cut_requests"):
        text += f" [cut: {', '.join(sw['cut_requests'][:3])}]"
    if sw.get("still_holding"):
        text += "; requests are still held (no engine serves)"
    if sw.get("kept_serving"):
        text += "; the new engine never took traffic: the old one served on"
    elif (sw.get("standby") or {}).get("why") and sw.get("mode") != "standby":
        text += f" [{sw['standby']['why']}]"  # why a standby-mode switch held
    return text


def clients_cell(record: dict[str, Any]) -> str:
    """The history table's column: `hold 3.2s 12h 0c 0r`, `none 10.8s`, or empty."""
    sw = record.get("switch")
    if not sw:
        return ""
    down = sw.get("downtime_s")
    cell = f"{sw.get('mode')} " + ("?" if down is None else f"{down:.1f}s")
    if sw.get("mode") == "none":
        return cell
    return cell + f" {sw.get('held', 0)}h {_n(sw.get('cut'))}c {_n(sw.get('refused'))}r"
