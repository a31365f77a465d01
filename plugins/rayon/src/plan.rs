//! The plan: the cluster's capacity over time, in steps. (Being written.)
