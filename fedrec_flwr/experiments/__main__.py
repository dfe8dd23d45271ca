"""``python -m fedrec_flwr.experiments``."""

import sys

from fedrec_flwr.experiments.command import main

sys.exit(main())
