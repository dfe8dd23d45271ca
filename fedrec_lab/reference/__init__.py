"""The parts of the reference runs (``bench/reference/``) that are not the scripts themselves:
what every reference script shares (:mod:`.runs`), the reference code's input files
(:mod:`.ratings`) and the batches a driver feeds it (:mod:`.batches`)."""
