"""`python -m glasses_rag.policies.presets`: the bundled presets, what each follows and what is a stand-in offline."""

from glasses_rag.policies.presets import main

raise SystemExit(main())
