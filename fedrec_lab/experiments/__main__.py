"""``python -m fedrec_lab.experiments``."""

import sys

from fedrec_lab.experiments.command import main

sys.exit(main())
