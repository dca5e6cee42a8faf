"""The package version: what every output's manifest records, so a resume refuses output of another version."""

from __future__ import annotations

__version__ = "0.1.0"
