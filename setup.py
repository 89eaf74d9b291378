"""The optional compiled scanner (trace/_scan.c); everything else is in pyproject.toml.

A failed compile does not fail the install: the trace loader then decodes with msgspec alone.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("trainprof.trace._scan", ["src/trainprof/trace/_scan.c"],
                             optional=True)])
