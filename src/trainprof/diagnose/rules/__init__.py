"""The rules: one small function per finding id, grouped by theme, thresholds as constants.

A rank rule takes one ``RankAnalysis`` and returns a ``Finding`` or None; a job rule takes the
whole ``Analysis`` and the rank findings, and returns a list. The list of rules in force and
every finding id are in ``diagnose/registry.py``. docs/rules.md explains every threshold and
estimate. This package's ``__init__`` imports nothing: a rule's module is imported alone.
"""

from trainprof.deprecated import old_names

__getattr__ = old_names(__name__, {name: f"trainprof.diagnose.registry:{name}" for name in (
    "RANK_RULES", "JOB_RULES", "FINDING_IDS", "RankRule", "JobRule")})
