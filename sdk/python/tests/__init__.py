"""Tests of the sbx Python SDK (run: python3 -m unittest discover -s sdk/python/tests)."""
