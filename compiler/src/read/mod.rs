//! Stage 1 of the pipeline, read: the rule files of a repository to the typed model. Finding
//! the files (`source`, the crate's only file I/O) and the texts one run parsed (`sourcemap`),
//! the limits on what a repository may ask, the KDL reader, the syntax of each node kind and
//! its hints, set files (`setfile`, their line format `setlines`) and their cache (`setcache`; a changed file patched from its previous version: `setpatch`), and the value mini-languages (`units`).

pub mod kdl_reader;
pub mod limits;
pub mod setcache;
pub mod setfile;
pub mod setlines;
pub mod setpatch;
pub mod source;
pub mod sourcemap;
pub mod syntax;
pub mod syntax_hints;
pub mod units;
