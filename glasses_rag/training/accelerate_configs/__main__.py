import sys

from glasses_rag.training.accelerate_configs import main

sys.exit(main())
