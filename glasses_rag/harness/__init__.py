"""The run harness, beside the benchmarks and outside the agent: running a task over a dataset with concurrency,
resume and scoring records (`runner.py`), worker processes (`workers.py`), the CLI's options generated from the
configuration (`cli.py`, `run_options.py`) and the official starter kit's adapter (`starter_kit.py`). The CLI
itself is `python -m graph.run`."""
