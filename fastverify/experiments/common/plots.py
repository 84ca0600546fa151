"""Whether the experiments can draw their PNG plots, and the one note that says how to get
them when they cannot (matplotlib is the `plot` extra; `./scripts/run` installs it)."""

from __future__ import annotations

INSTALL_HINT = "pip install 'fastverify[plot]' (in a checkout: .venv/bin/pip install -e '.[plot]')"


def missing_note() -> str | None:
    """None when matplotlib imports; else why plots are skipped and how to get them."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f"plots skipped: matplotlib is not installed; {INSTALL_HINT}"
    return None
