"""``python -m fedrec_lab.analysis`` = ``fedrec analyze``."""

from fedrec_lab.analysis.command import main

raise SystemExit(main())
