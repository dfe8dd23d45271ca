"""``python -m fedrec_lab.tuning``: the same as ``fedrec tune``."""

from fedrec_lab.tuning import main

main()
