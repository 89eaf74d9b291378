"""Nsight Systems exports (``nsys export --type sqlite``) read into the same ``Trace`` model as
Kineto traces (docs/nsys.md): detect.py tells the files, schema.py opens one, tables.py and
nvtx.py read its tables, build.py makes one trace per process."""
