//! The KDL v2 grammar of nodes over the [`Cursor`]'s tokens: documents, nodes, entries, type
//! annotations, child blocks and slashdash comments. Spans follow the `kdl` crate's: a node
//! from its type or name to the spaces before its terminator, an entry from its key (or type)
//! to the end of its value, a child block from its first node's start to its last node's end.

use super::lexer::{first_disallowed, Cursor};
use super::{Document, Entry, Ident, Node, ReadError, TextSpan, Value};

type Result<T> = std::result::Result<T, ReadError>;

pub struct Parser<'a> {
    c: Cursor<'a>,
}

impl<'a> Parser<'a> {
    pub fn new(text: &'a str) -> Parser<'a> {
        Parser { c: Cursor::new(text) }
    }

    /// `document := bom? nodes`
    pub fn document(mut self) -> Result<Document> {
        if let Some((at, ch)) = first_disallowed(self.c.text) {
            return Err(ReadError::at(at, ch.len_utf8(), format!("the code point U+{:04X} may not appear in a KDL document", ch as u32)));
        }
        if self.c.text.starts_with('\u{feff}') {
            self.c.pos = 3;
        }
        self.nodes(false)
    }

    /// `nodes := (line-space* node)* line-space*`, up to the end or (in a block) the `}`.
    fn nodes(&mut self, in_block: bool) -> Result<Document> {
        let mut nodes = Vec::new();
        loop {
            self.c.line_space()?;
            match self.c.peek() {
                None if in_block => return Err(self.c.error("no closing '}' for child block")),
                None => break,
                Some('}') if in_block => break,
                Some('}') => return Err(self.c.error("unexpected '}': no child block is open")),
                _ => {}
            }
            if self.slashdash()? {
                self.base_node()?;
            } else {
                nodes.push(self.base_node()?);
            }
            self.terminator(in_block)?;
        }
        let span = match (nodes.first(), nodes.last()) {
            (Some(first), Some(last)) => TextSpan::between(first.span.offset, last.span.offset + last.span.len),
            _ => TextSpan { offset: self.c.pos, len: 0 },
        };
        Ok(Document { nodes, span })
    }

    /// `/-` and the line space after it; true if there was one.
    fn slashdash(&mut self) -> Result<bool> {
        if !self.c.at("/-") {
            return Ok(false);
        }
        self.c.pos += 2;
        self.c.line_space()?;
        Ok(true)
    }

    /// `node-terminator := single-line-comment | newline | ';' | eof` (or the block's `}`).
    fn terminator(&mut self, in_block: bool) -> Result<()> {
        match self.c.peek() {
            None => Ok(()),
            Some(';') => {
                self.c.pos += 1;
                Ok(())
            }
            Some('}') if in_block => Ok(()),
            _ if self.c.newline() || self.c.line_comment_if_any() => Ok(()),
            _ => Err(self.c.error("expected the end of the node: a newline, `;` or a comment")),
        }
    }

    /// `base-node := type? node-space* string (node-space+ entry)* children? node-space*`
    /// (slashdashed entries and blocks anywhere they may appear).
    fn base_node(&mut self) -> Result<Node> {
        let start = self.c.pos;
        let ty = if self.c.peek() == Some('(') { Some(self.ty()?) } else { None };
        self.c.node_space()?;
        let name = match self.c.string()? {
            Some((value, span)) => Ident { value, span },
            None => return Err(self.c.error("expected a node name (a string)")),
        };
        let mut entries = Vec::new();
        let mut dashed_block = false;
        loop {
            if !self.c.node_space()? && !self.c.at("/-") {
                break;
            }
            if self.slashdash()? {
                if self.c.peek() == Some('{') {
                    self.block()?;
                    dashed_block = true;
                } else if dashed_block {
                    return Err(self.c.error("only child blocks may follow a slashdashed child block"));
                } else {
                    self.entry()?;
                }
                continue;
            }
            if self.at_node_end() || self.c.peek() == Some('{') {
                break;
            }
            if dashed_block {
                return Err(self.c.error("arguments and properties must come before child blocks"));
            }
            entries.push(self.entry()?);
        }
        let mut children = None;
        if self.c.peek() == Some('{') {
            children = Some(self.block()?);
            loop {
                self.c.node_space()?;
                if !self.slashdash()? {
                    break;
                }
                if self.c.peek() != Some('{') {
                    return Err(self.c.error("only slashdashed child blocks may follow a node's child block"));
                }
                self.block()?;
            }
        }
        Ok(Node { ty, name, entries, children, span: TextSpan::between(start, self.c.pos) })
    }

    fn at_node_end(&self) -> bool {
        matches!(self.c.peek(), None | Some(';' | '}')) || self.c.at_newline() || self.c.at_line_comment()
    }

    /// `{ nodes }`
    fn block(&mut self) -> Result<Document> {
        let open = self.c.pos;
        self.c.pos += 1;
        let doc = self.nodes(true).map_err(|e| if e.message.starts_with("no closing") { ReadError::at(open, 1, e.message) } else { e })?;
        self.c.pos += 1;
        Ok(doc)
    }

    /// `type := '(' node-space* string node-space* ')'`
    fn ty(&mut self) -> Result<Ident> {
        self.c.pos += 1;
        self.c.node_space()?;
        let Some((value, span)) = self.c.string()? else {
            return Err(self.c.error("expected a type name (a string) in the type annotation"));
        };
        self.c.node_space()?;
        if self.c.peek() != Some(')') {
            return Err(self.c.error("expected `)` to close the type annotation"));
        }
        self.c.pos += 1;
        Ok(Ident { value, span })
    }

    /// `prop := string node-space* '=' node-space* value` or `value`.
    fn entry(&mut self) -> Result<Entry> {
        let start = self.c.pos;
        if self.c.peek() != Some('(') {
            if let Some((s, key_span)) = self.c.string()? {
                let after = self.c.pos;
                self.c.node_space()?;
                if self.c.peek() != Some('=') {
                    self.c.pos = after;
                    return Ok(Entry { name: None, ty: None, value: Value::String(s), span: TextSpan::between(start, after) });
                }
                self.c.pos += 1;
                self.c.node_space()?;
                let (ty, value) = self.value()?;
                let name = Some(Ident { value: s, span: key_span });
                return Ok(Entry { name, ty, value, span: TextSpan::between(start, self.c.pos) });
            }
        }
        let (ty, value) = self.value()?;
        Ok(Entry { name: None, ty, value, span: TextSpan::between(start, self.c.pos) })
    }

    /// `value := type? node-space* (string | number | keyword)`
    fn value(&mut self) -> Result<(Option<Ident>, Value)> {
        let ty = if self.c.peek() == Some('(') {
            let t = self.ty()?;
            self.c.node_space()?;
            Some(t)
        } else {
            None
        };
        if let Some((s, _)) = self.c.string()? {
            return Ok((ty, Value::String(s)));
        }
        let v = match self.c.peek() {
            Some('#') => self.c.keyword()?,
            Some('0'..='9' | '+' | '-' | '.') => self.c.number()?,
            _ => return Err(self.c.error("expected a value: a string, a number or a keyword such as #true")),
        };
        Ok((ty, v))
    }
}
