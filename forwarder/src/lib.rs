//! The userspace forwarder (being written).
