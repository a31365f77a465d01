//! Adaptive replanning after capacity loss. (Being written.)
