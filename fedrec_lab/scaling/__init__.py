"""The scale harness's parts (``bench/scale.py``): RSS sampling, case records, the table."""
