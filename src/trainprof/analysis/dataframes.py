"""Optional pandas export of analysis results (pandas is the ``trainprof[pandas]`` extra)."""

from __future__ import annotations

from typing import Any


def data_frame(rows: list[dict[str, Any]]) -> Any:
    """A pandas DataFrame with one row per dict; a clear ImportError without pandas."""
    try:
        import pandas as pd
    except ImportError as exc:
        raise ImportError(
            "to_pandas() needs pandas: install the extra with pip install 'trainprof[pandas]'"
        ) from exc
    return pd.DataFrame(rows)
