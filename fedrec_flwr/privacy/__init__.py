"""Privacy of the uploads: local differential privacy on item rows (:mod:`.ldp`), decoy rows
(:mod:`.decoys`) and their stages of a node's upload chain (:mod:`.uploads`), the server's
denoising (:mod:`.denoise`), secure aggregation (:mod:`.secagg`, the node's and the server's
checks in :mod:`.secagg_trust`, its stages in :mod:`.secure_upload`) and the user-level
accounting of LDP (:mod:`.accounting`)."""
