"""The repository root on ``sys.path``: a benchmark script run as ``python benchmarks/NAME.py`` then imports the papers'
reproductions (``reproductions/``, in the repository but not in the wheel). Import it before ``reproductions``."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The repository checkout holding ``benchmarks/`` and ``reproductions/``."""
if str(ROOT) not in sys.path:
    sys.path.insert(1, str(ROOT))
