//! The actor runtime of object-store-wal; see the workspace README. Built in the next step.
