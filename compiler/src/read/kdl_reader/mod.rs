//! fwc's own KDL v2 reader: text -> a plain document (nodes, arguments, properties, type
//! annotations) with byte spans, for the compile path. The `kdl` crate's lossless tree is
//! kept only where formatting needs it (`fwc fmt`); spans here are the same as that crate's.

mod error;
mod lexer;
mod model;
mod parser;

pub use error::ReadError;
pub use model::{Document, Entry, Ident, Node, TextSpan, Value};

/// Read a whole KDL v2 document. The text's size and nesting must already be bounded
/// ([`crate::read::limits::check_kdl_text`]): the reader recurses once per child block.
pub fn read(text: &str) -> Result<Document, ReadError> {
    parser::Parser::new(text).document()
}
