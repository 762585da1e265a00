"""Shared test settings: CPU, float32, fixed seeds."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
