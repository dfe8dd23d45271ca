"""``python -m fedrec_lab.launch``: the same as ``fedrec run``."""

import sys

from fedrec_lab.launch.command import main

sys.exit(main())
