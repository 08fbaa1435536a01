"""Builds the compiled modules; pyproject.toml stays the metadata source.

Each module is the project's own ``.py``, compiled by Cython in pure Python mode: the same file runs interpreted
when no extension was built, so the two can never be different code.
"""

from Cython.Build import cythonize
from setuptools import setup

COMPILED_MODULES = ["src/txmq/message_columns.py"]

setup(ext_modules=cythonize(COMPILED_MODULES, compiler_directives={"language_level": "3"}))
