"""What a run's model looks like at its best validation round (``fedrec analyze``): the
generalization gap, sharpness (top Hessian eigenvalue, rho-sharpness), item views, the SAM
table."""
