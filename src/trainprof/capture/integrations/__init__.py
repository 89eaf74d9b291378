"""Recording under accelerate and Lightning with trainprof's options and file layout."""
