"""The package version (setup.cfg reads it; outputs record it)."""

__version__ = "0.1.0"
