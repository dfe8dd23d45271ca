"""``python -m fedrec_lab.baselines``: the same as ``fedrec baselines``."""

from fedrec_lab.baselines.command import main

main()
