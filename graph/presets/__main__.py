"""`python -m graph.presets`: the bundled presets, what each follows and what is a stand-in offline."""

from graph.presets import main

raise SystemExit(main())
