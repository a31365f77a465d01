//! The offline optimiser: the paper's MILP over the accepted plan. (Being written.)
