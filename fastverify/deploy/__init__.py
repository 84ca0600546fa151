"""Deployment rendering: what an operator installs fastverify with. `kubernetes/` renders a
fleet's manifests (built as data, written by PyYAML); this host's systemd units and compose
stack are fastverify/render.py (to move here). A leaf: it reads the configuration, the
profiles and the SGLang facts, never the daemon."""
