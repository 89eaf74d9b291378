"""What the tests share: the test data's paths (``helpers.paths``), synthetic trace builders
(``tracegen``, ``modern_traces``, ``critical_path_traces``, ``model_parallel_traces``,
``snapshotgen``, ``long_names``), the recorded jobs' session fixtures (``parallel_recordings``,
``ddp_recordings``, ``tp_ep_recordings``, ``job_recording``), the run-wide lock
(``exclusive``), the Ctrl-C scripts (``ctrl_c``) and a module workload (``module_workload``).
Tests import them as ``from helpers.tracegen import ...``; nothing is imported from conftest."""
