"""The reproducibility page: every claim of the source papers, checked against committed
results (``python -m fedrec_lab.claims`` writes ``docs/claims.md``)."""
