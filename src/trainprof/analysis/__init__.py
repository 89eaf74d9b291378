"""The facts of a trace, in folders by subject (docs/architecture.md)."""

# numpy imports numpy.ma on the first call of np.unique without return_* arguments (to refuse
# masked arrays) and in np.percentile: 17 ms, paid by whatever analysis ran first. It is
# imported here, with the analysis's own modules, so that it is counted with the imports
# (as pandas-based tools import it) rather than inside the first analysis (docs/performance.md).
import numpy.ma  # noqa: E402, F401

