"""``python -m fedrec_lab.claims``."""

from fedrec_lab.claims.page import main

raise SystemExit(main())
