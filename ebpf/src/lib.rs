//! eBPF QoS loader (being written).
