//! The document the reader produces: what the lowering consumes, nothing about layout.
//! Every node, name and entry knows its byte span in the text it was read from.

/// A byte range of the source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TextSpan {
    pub offset: usize,
    pub len: usize,
}

impl TextSpan {
    pub(crate) fn between(start: usize, end: usize) -> TextSpan {
        TextSpan { offset: start, len: end - start }
    }
    pub fn offset(&self) -> usize {
        self.offset
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A KDL value (strings already unescaped, numbers converted).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    String(String),
    Integer(i128),
    Float(f64),
    Bool(bool),
    Null,
}

/// A name (node name, property key, type annotation) with the span of its token.
#[derive(Debug, Clone, PartialEq)]
pub struct Ident {
    pub value: String,
    pub span: TextSpan,
}

impl Ident {
    pub fn value(&self) -> &str {
        &self.value
    }
    pub fn span(&self) -> TextSpan {
        self.span
    }
}

/// An argument (`name` is None) or a property.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub name: Option<Ident>,
    pub ty: Option<Ident>,
    pub value: Value,
    /// From the key (or the value's type annotation) to the end of the value.
    pub span: TextSpan,
}

impl Entry {
    pub fn name(&self) -> Option<&Ident> {
        self.name.as_ref()
    }
    pub fn ty(&self) -> Option<&Ident> {
        self.ty.as_ref()
    }
    pub fn value(&self) -> &Value {
        &self.value
    }
    pub fn span(&self) -> TextSpan {
        self.span
    }
}

/// One node; `span` runs from its type annotation or name to the end of its last entry or
/// block, including the spaces before its terminator.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub ty: Option<Ident>,
    pub name: Ident,
    pub entries: Vec<Entry>,
    pub children: Option<Document>,
    pub span: TextSpan,
}

impl Node {
    pub fn name(&self) -> &Ident {
        &self.name
    }
    pub fn ty(&self) -> Option<&Ident> {
        self.ty.as_ref()
    }
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }
    pub fn children(&self) -> Option<&Document> {
        self.children.as_ref()
    }
    pub fn span(&self) -> TextSpan {
        self.span
    }
}

/// A list of nodes (the file, or a child block: then `span` runs from the first node's start
/// to the last node's end, or is empty at the closing `}`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Document {
    pub nodes: Vec<Node>,
    pub span: TextSpan,
}

impl Document {
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }
    pub fn span(&self) -> TextSpan {
        self.span
    }
}

/// A value as KDL writes it (strings quoted; numbers and keywords as the `kdl` crate prints them).
impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::String(s) => write!(f, "{s:?}"),
            Value::Integer(i) => write!(f, "{i}"),
            Value::Float(v) if *v == f64::INFINITY => write!(f, "#inf"),
            Value::Float(v) if *v == f64::NEG_INFINITY => write!(f, "#-inf"),
            Value::Float(v) if v.is_nan() => write!(f, "#nan"),
            Value::Float(v) => write!(f, "{v:?}"),
            Value::Bool(b) => write!(f, "#{b}"),
            Value::Null => write!(f, "#null"),
        }
    }
}
