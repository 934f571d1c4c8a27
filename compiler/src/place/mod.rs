//! Stage 3 of the pipeline, place: one host's plan. Which rules apply to the host (`on=`),
//! which dataplane carries each forward, QoS class ids (`select`), and how a big set is laid
//! out in the kernel (`setlayout`, from the merged intervals of `merged`).

pub mod merged;
pub mod select;
pub mod setlayout;
