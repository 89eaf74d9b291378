"""trainprof's version (a leaf: the modules that print it need not import the package)."""

__version__ = "0.1.0"
