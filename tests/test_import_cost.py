"""What importing trainprof loads (issue 28): the analysis without the renderers and the
optional parts, and its module-level regular expressions not compiled until first used.
Each check runs in a fresh interpreter, so that no other test's imports are counted."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers.paths import RESNET_W0, ROOT

#: Modules that `trainprof analyze --format json` and `import trainprof.pipeline` never need:
#: the terminal, Markdown and HTML renderers and what they use, the Dask executor's futures,
#: and the standard library's secrets (random names of temporary files come from os.urandom).
NOT_FOR_JSON = ("rich", "jinja2", "trainprof.report.terminal", "trainprof.report.markdown",
                "trainprof.report.html", "concurrent.futures", "secrets")


def loaded_after(code: str) -> list[str]:
    """The modules in sys.modules after running ``code`` in a fresh interpreter."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def unwanted(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == u or m.startswith(u + ".") for u in NOT_FOR_JSON)]


def test_importing_the_pipeline_loads_no_renderer():
    modules = loaded_after("import trainprof.pipeline")
    assert "trainprof.analysis.analyze" in modules  # the import did happen
    assert unwanted(modules) == []


def test_analyze_to_json_loads_no_renderer(tmp_path):
    out = tmp_path / "result.json"
    code = ("import sys\nfrom trainprof.cli import main\n"
            f"assert main(['analyze', {str(RESNET_W0)!r}, '--format', 'json', '-o', {str(out)!r}])"
            " == 0")
    modules = loaded_after(code)
    assert json.loads(out.read_text())["schema"].startswith("trainprof.analysis/")
    assert "trainprof.report.json" in modules
    assert unwanted(modules) == []


def test_module_patterns_compile_on_first_use():
    code = ("from trainprof.trace import kernel_class, model\n"
            "print(kernel_class._TENSOR_CORE._ascii._compiled, model._STEP._compiled)\n"
            "assert kernel_class.uses_tensor_cores('sm90_xmma_gemm_bf16bf16')\n"
            "print(kernel_class._TENSOR_CORE._ascii._compiled is not None)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, check=True)
    assert done.stdout.splitlines() == ["None None", "True"]
