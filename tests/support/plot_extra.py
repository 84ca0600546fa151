"""An install without the plot extra (matplotlib), as the tune and sweep output tests make one."""

from __future__ import annotations

from pathlib import Path

from tests.support.harness import REPO


def without_matplotlib(tmp: Path) -> dict[str, str]:
    """An environment whose `import matplotlib` fails as on an install without the extra."""
    shadow = tmp / "no-matplotlib"
    (shadow / "matplotlib").mkdir(parents=True, exist_ok=True)
    (shadow / "matplotlib" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'matplotlib'\", name='matplotlib')\n"
    )
    return {"PYTHONPATH": f"{shadow}:{REPO}"}
