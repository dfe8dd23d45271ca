"""Privacy of the uploads: local differential privacy on item rows (:mod:`.ldp`), decoy rows
(:mod:`.decoys`), the per-user upload both build (:mod:`.uploads`) and the honest-but-curious
server's attacks that measure what is left (:mod:`.attacks`)."""
