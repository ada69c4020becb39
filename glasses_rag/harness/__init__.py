"""The run harness, beside the benchmarks and outside the agent: one run from the command line's options
(`session.py`: its data in `run_data.py`, its folder in `run_folder.py`, its scoring and reports in `run_scoring.py`,
what it prints in `console.py`), running a task over a dataset with concurrency, resume and scoring records
(`runner.py`), worker processes (`workers.py`), the CLI's options generated from the configuration (`cli.py`,
`run_options.py`) and the official starter kit's adapter (`starter_kit.py`). The command line itself is
`python -m graph.run`."""
