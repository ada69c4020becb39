"""The run harness, beside the benchmarks and outside the agent: the benchmarks a run can evaluate, by name
(`benchmarks.py`: one registry of `glasses_rag.evaluation.Benchmark`s), one run from the command line's options
(`session.py`: its benchmark's data prepared in `run_data.py`, its folder in `run_folder.py`, its scoring and reports
in `run_scoring.py`, what it prints in `console.py`), running a task over a dataset with concurrency, resume and
scoring records (`runner.py`), worker processes (`workers.py`) and the CLI's options generated from the configuration
(`cli.py`, `run_options.py`). The command line itself is `python -m graph.run` (glasses_rag/frontends/run.py)."""
