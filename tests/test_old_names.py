"""Names that moved or were renamed (one name per idea) still work from their old place, with a
DeprecationWarning naming the new one (trainprof/deprecated.py)."""

from __future__ import annotations

import importlib
import warnings

import pytest

#: (old module, old name, new module, new name)
OLD_NAMES = [
    ("trainprof.analysis.options", "TableOptions", "trainprof.analysis.options", "AnalyzeOptions"),
    ("trainprof.analysis.options", "table_options", "trainprof.analysis.options",
     "analyze_options"),
    ("trainprof.analysis.options", "using_table_options", "trainprof.analysis.options",
     "using_options"),
    ("trainprof.diagnose.rules", "RANK_RULES", "trainprof.diagnose.registry", "RANK_RULES"),
    ("trainprof.diagnose.rules", "JOB_RULES", "trainprof.diagnose.registry", "JOB_RULES"),
    ("trainprof.diagnose.rules", "FINDING_IDS", "trainprof.diagnose.registry", "FINDING_IDS"),
    ("trainprof.diagnose.compare", "Verdict", "trainprof.diagnose.comparison", "SpeedVerdict"),
    ("trainprof.diagnose.comparison", "Verdict", "trainprof.diagnose.comparison", "SpeedVerdict"),
    ("trainprof.history.views.regress", "Verdict", "trainprof.history.views.regress",
     "RegressionVerdict"),
]


@pytest.mark.parametrize("old_module, old, new_module, new", OLD_NAMES,
                         ids=[f"{m}.{n}" for m, n, _, _ in OLD_NAMES])
def test_an_old_name_is_the_new_object_and_warns(old_module, old, new_module, new):
    module = importlib.import_module(old_module)
    with pytest.warns(DeprecationWarning, match=rf"{old_module}\.{old} is now "
                                                rf"{new_module}\.{new}"):
        value = getattr(module, old)
    assert value is getattr(importlib.import_module(new_module), new)


def test_one_verdict_type_is_left_named_verdict():
    from trainprof.diagnose import verdicts

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert verdicts.Verdict.__module__ == "trainprof.diagnose.verdicts"
        with pytest.raises(AttributeError):
            importlib.import_module("trainprof.analysis.options").NoSuchOption  # noqa: B018
