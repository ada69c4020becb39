"""The agent's command line, `python -m graph.run --task {1,2,3}`: the design's entry point, a few lines that call
the front end (`glasses_rag/frontends/run.py`, which parses the options and hands the run to the harness).

Example::

    python -m graph.run --task 1 --limit 2
"""

from glasses_rag.frontends.run import main

if __name__ == "__main__":
    from glasses_rag.core.calls import exit_process

    exit_process(main())  # cancels what is still in flight; never an abort in the interpreter's teardown
