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


def simulated_tag(engine: Any) -> str:
    """ " - SIMULATED (...)" for a figure or table of figures the sim engine measured (its
    engine identity: `{kind, version, simulated}`), else ""."""
    if not isinstance(engine, dict) or not engine.get("simulated"):
        return ""
    return f" - SIMULATED (the {engine.get('kind')} engine playing SGLang {engine.get('version')})"


def texts(fig: Any) -> list[str]:
    """Every text `fig` shows, in reading order: titles, axis labels, tick labels, legend
    entries and annotations (what `save` writes into the PNG's Description)."""
    out = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        out += [ax.get_title(loc) for loc in ("left", "center", "right")]
        out += [ax.get_xlabel(), ax.get_ylabel()]
        out += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
        legend = ax.get_legend()
        if legend is not None:
            out += [t.get_text() for t in legend.get_texts()]
        out += [t.get_text() for t in ax.texts]
    return [t for t in out if t and t.strip()]


def save(fig: Any, path: Path) -> Path:
    """Write `fig` to `path` as every experiment's PNG is (tight layout, 110 dpi) and free it;
    the figure's text (`texts`) goes into the PNG's Description, a text alternative that
    tools, screen readers and tests can read."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.canvas.draw()  # tick labels exist once drawn
    fig.savefig(path, dpi=110, metadata={"Description": "\n".join(texts(fig))})
    plt.close(fig)
    return path
