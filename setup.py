"""The compiled parts of trainprof (docs/performance.md): the trace scanner and the reader of
Nsight Systems rows.

Everything else about the package is in pyproject.toml; the extensions are declared here
because setuptools' pyproject form of them (``[tool.setuptools.ext-modules]``) is still
experimental. ``optional=True``: where one does not compile, the install goes on and traces are
decoded by msgspec alone (the scanner), exports read through Python's sqlite3 module (the
rows reader).
"""

import sys

from setuptools import Extension, setup

# dlopen/dlsym: in libc from glibc 2.34 on, in libdl before (which newer glibc keeps as a stub).
_DL = ["dl"] if sys.platform.startswith("linux") else []

setup(ext_modules=[Extension("trainprof.trace._scan", ["src/trainprof/trace/_scan.c"],
                             optional=True),
                   Extension("trainprof.trace.nsys._rows", ["src/trainprof/trace/nsys/_rows.c"],
                             libraries=_DL, optional=True)])
