"""The agent: its state (`state.py`), nodes (`nodes.py`) and LangGraph graph (`flow.py`), the `Agent` that runs a
turn (`agent.py`), its configuration (`config.py`), the one way to build it (`build.py`), and the CLI
(`python -m graph.run`)."""
