"""Whether the experiments can draw their PNG plots, the one note that says how to get
them when they cannot (matplotlib is the `plot` extra; `./scripts/run` installs it), and
the one way they draw and write one (`pyplot`, `save`; matplotlib imported only there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

INSTALL_HINT = "pip install 'fastverify[plot]' (in a checkout: .venv/bin/pip install -e '.[plot]')"


def missing_note() -> str | None:
    """None when matplotlib imports; else why plots are skipped and how to get them."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f"plots skipped: matplotlib is not installed; {INSTALL_HINT}"
    return None


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path) -> Path:
    """Write `fig` to `path` as every experiment's PNG is (tight layout, 110 dpi) and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
