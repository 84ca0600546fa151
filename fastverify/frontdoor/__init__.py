"""The front door: a small asyncio HTTP/1.1 relay on the server's public port, in front of
the engine's internal port, that can hold new requests while the engine is switched.

gate.py owns the hold state (the bounded queue, in-flight requests, the counts of one switch);
relay.py the HTTP relay (streaming included); control.py the local control socket that
fastverifyd drives (hold, drain, serve PORT, status); __main__.py the process; layout.py
where it and the engine listen; standby.py the standby memory rule. The daemon's side (its
process group, the switch steps) lives in fastverify/daemon (frontdoor_group.py,
frontdoor.py): this package imports nothing of the daemon.

Standard library only: the front door runs on the daemon's interpreter with nothing to carry.
"""
