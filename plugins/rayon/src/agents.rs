//! Admission agents: GREE and GREE-L. (Being written.)
