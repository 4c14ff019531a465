"""Everything lives in pyproject.toml; this stub exists for tools that still call setup.py."""

from setuptools import setup

setup()
