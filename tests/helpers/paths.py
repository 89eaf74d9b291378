"""Where the test data are: the real traces copied into tests/data/traces (with their licences,
tests/data/traces/README.md) and the Nsight Systems exports."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The real traces, copied into the repository with their licences (tests/data/traces/README.md).
SHARED = ROOT / "tests" / "data" / "traces"

KINETO = SHARED / "kineto" / "tb_plugin"
RESNET_W0 = KINETO / "samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
RESNET_W0_SPAN2 = KINETO / "samples/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz"
RESNET_W4 = KINETO / "samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"
RESNET_W4_SPAN2 = KINETO / "samples/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz"
HTA = SHARED / "hta" / "tests" / "data"
NS_TRACE = HTA / "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
NCCL_TRACE = HTA / "nccl_parser_config/nccl_data.json.gz"
TRACE_FILTER = HTA / "trace_filter"
BIG_TRACE = HTA / "df_index_resolver/df_index_resolver.json.gz"
ALEXNET = HTA / "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
H100 = SHARED / "tracelens" / "tests" / "traces" / "h100"
TIMESFORMER = H100 / "facebook_timesformer-base-finetuned-k400__1016002.json.gz"
BERT = H100 / "gaunernst_bert-small-uncased__1016001.json.gz"
PARAM = SHARED / "param/et_replay/tests/inputs/resnet_kineto.json.gz"
COMPILED = SHARED / "jupytertracerviz" / "trace.json"
GPU_METRICS = KINETO / "test/gpu_metrics_input.json"
RESULT_CHECK = KINETO / "test/result_check_file.txt"
#: Nsight Systems exports (nsys 2026.x, ``nsys export --type sqlite``), kept in the repository.
NSYS = ROOT / "tests" / "data" / "traces" / "nsys"
NSYS_H100 = NSYS / "h100_2gpu_1s.sqlite"
NSYS_HEALTHY = NSYS / "healthy_1pct.sqlite"
NSYS_MOCK = NSYS / "mock.sqlite"
NSYS_EXPORTS = (NSYS_H100, NSYS_HEALTHY, NSYS_MOCK)
#: Every trace file under shared/traces (the TensorBoard plugin's expected-output file is text):
#: the suites that run on every shared trace take this one list.
SHARED_TRACE_FILES = sorted(p for p in SHARED.rglob("*.json*") if "result_check" not in p.name)
