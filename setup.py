"""The compiled scanner of trace pieces (docs/performance.md, "The compiled scanner").

Everything else about the package is in pyproject.toml; the extension is declared here because
setuptools' pyproject form of it (``[tool.setuptools.ext-modules]``) is still experimental.
``optional=True``: where it does not compile, the install goes on and traces are decoded by
msgspec alone.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("trainprof.trace._scan", ["src/trainprof/trace/_scan.c"],
                             optional=True)])
