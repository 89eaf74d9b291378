"""The deep analyses, one module per section, and the registry that runs them."""
