"""The SDK's version: the repository's VERSION file, copied here (a unit test checks they agree)."""

__version__ = "0.1.0"
