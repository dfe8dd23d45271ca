"""One command per table: ``python -m fedrec_lab.experiments <table> --data-dir DIR``.

Tables (:mod:`.tables`): ``pfedrec-table2``, ``pfedrec-table3``, ``pfedrec-table4``,
``strict``, ``leakage``. Each cell (:mod:`.cells`) is one run named
``<preset>[+tag]-<dataset>-<protocol>-seed<s>`` in ``<out>/runs/``, run once; the table
(:mod:`.report`) is written to ``<out>/<table>.md`` and ``<out>/<table>.png``.
"""
