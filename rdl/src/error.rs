//! The error every RDL refusal becomes: where (line, column, and the path of the offending
//! value) and why.

use std::fmt;

/// What sort of refusal an [`RdlError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Not well formed: an unexpected character or token, an unterminated construct, trailing
    /// text after the expression, malformed JSON.
    Syntax,
    /// The input is larger than [`super::MAX_INPUT_BYTES`].
    TooLarge,
    /// Expressions nest deeper than [`super::MAX_NESTING`].
    TooDeep,
    /// An operator, key or unit nobody knows.
    Unknown,
    /// An operator with too few or too many arguments, or a JSON object lacking a key.
    Arity,
    /// A value of the wrong type, unit or range (a fraction where a whole number belongs, a
    /// number past its limit, a repeated bundle component).
    Value,
    /// Well formed but meaningless: a zero, `g > h`, work that does not split into gangs, a
    /// bundle of nothing, an empty window or operator.
    Invalid,
    /// Cannot fit in time: an atom's work or lease, or an `order` chain, does not fit its window.
    Fit,
}

/// Why an RDL text or JSON document was refused, and where.
///
/// `line` and `column` count from 1; the column counts characters (Unicode scalar values), not
/// bytes. `path` names the offending value in the expression tree, in the JSON form's keys
/// (`window.expr.order[1].atom.g`); it is empty for errors that are not about one value (a
/// stray character) and for the root expression. Errors from [`super::Expr::validate`], which
/// has no source text, carry line and column 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdlError {
    /// Line, from 1 (0: no source).
    pub line: usize,
    /// Column in characters, from 1 (0: no source).
    pub column: usize,
    /// The offending value's path in the tree (may be empty).
    pub path: String,
    /// The sort of refusal.
    pub kind: ErrorKind,
    /// Why, in words.
    pub reason: String,
}

impl fmt::Display for RdlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "line {}, column {}: ", self.line, self.column)?;
        }
        f.write_str(&self.reason)?;
        if !self.path.is_empty() {
            write!(f, " (at {})", self.path)?;
        }
        Ok(())
    }
}

impl std::error::Error for RdlError {}

/// 1-based line and character column of byte `offset` in `src` (clamped to the text; an offset
/// inside a multi-byte character counts as that character).
pub(crate) fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(src.len());
    while !src.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &src[..offset];
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// An error at byte `offset` of `src`.
pub(crate) fn at(
    src: &str,
    offset: usize,
    path: &str,
    kind: ErrorKind,
    reason: impl Into<String>,
) -> RdlError {
    let (line, column) = line_col(src, offset);
    RdlError { line, column, path: path.to_owned(), kind, reason: reason.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_character_columns() {
        let s = "ab\nçd\n\nx";
        assert_eq!(line_col(s, 0), (1, 1));
        assert_eq!(line_col(s, 2), (1, 3));
        assert_eq!(line_col(s, 3), (2, 1));
        assert_eq!(line_col(s, 5), (2, 2)); // after the two-byte ç
        assert_eq!(line_col(s, 4), (2, 1)); // inside ç
        assert_eq!(line_col(s, 8), (4, 1));
        assert_eq!(line_col(s, 99), (4, 2));
    }
}
