//! The one rule for names that people read in listings — applications, users, queues, nodes,
//! racks, label keys and values, reservations: at most [`MAX_NAME_LEN`] bytes, and no character
//! that breaks or disguises a line of a table. The engine, the REST API, the agent's
//! configuration, the scheduler's tokens file and the simulator's inputs all check names here,
//! so a name one of them accepts is one every other accepts too.
//!
//! Refused characters ([`forbidden_char`]):
//!
//! - control characters (`Cc`: `\n`, `\t`, escape, …), which break or recolour a terminal line;
//! - every format character (`Cf`): the bidirectional controls (U+202A–U+202E, U+2066–U+2069,
//!   U+200E, U+200F, U+061C), which reorder what follows them — `evil\u{202E}gpj.exe` shows as
//!   `evilexe.jpg` — and the zero-width and invisible ones (U+200B–U+200D, U+2060–U+2064,
//!   U+FEFF, the soft hyphen, tag characters, …), which make two different names look the
//!   same;
//! - the other characters Unicode says to render invisibly that a name has no use for: the
//!   combining grapheme joiner, the Hangul and Khmer fillers and the unassigned default-ignorable
//!   code points, and the line and paragraph separators (U+2028, U+2029), which break lines.
//!
//! Variation selectors (U+FE00–U+FE0F, U+E0100–U+E01EF) and Mongolian free variation selectors
//! stay allowed: they only choose a glyph of the character before them (`❤️` is `❤` + U+FE0F).
//!
//! Names are checked, never normalised: nothing trims, case-folds or Unicode-normalises them, and
//! two names are the same only when their bytes are. `node-a` and `NODE-A` are two nodes, also
//! where a client certificate carries the name (the scheduler compares a certificate's names
//! exactly, not case-insensitively as DNS does); a name that only looks like another is refused
//! here rather than made equal to it.

use core::fmt;

/// Longest name, label key or label value, in bytes (a DNS name's limit, which host names and
/// Kubernetes-style labels share).
pub const MAX_NAME_LEN: usize = 253;

/// A character a name may not contain, with its Unicode name for error messages:
/// `U+202E (RIGHT-TO-LEFT OVERRIDE)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForbiddenChar(pub char);

impl ForbiddenChar {
    /// Its Unicode name, or what kind of character it is where a range shares one description.
    pub fn name(self) -> &'static str {
        let c = self.0 as u32;
        if self.0.is_control() {
            return match c {
                0x00 => "NULL, a control character",
                0x07 => "BELL, a control character",
                0x08 => "BACKSPACE, a control character",
                0x09 => "CHARACTER TABULATION, a control character",
                0x0A => "LINE FEED, a control character",
                0x0B => "LINE TABULATION, a control character",
                0x0C => "FORM FEED, a control character",
                0x0D => "CARRIAGE RETURN, a control character",
                0x1B => "ESCAPE, a control character",
                0x7F => "DELETE, a control character",
                0x85 => "NEXT LINE, a control character",
                0x9B => "CONTROL SEQUENCE INTRODUCER, a control character",
                _ => "a control character",
            };
        }
        lookup(c).unwrap_or("an invisible character")
    }
}

impl fmt::Display for ForbiddenChar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "U+{:04X} ({})", self.0 as u32, self.name())
    }
}

/// The characters refused besides control characters, as inclusive ranges with their names,
/// sorted by start. Every `Cf` (format) character of Unicode 15.1 is here.
const INVISIBLE: &[(u32, u32, &str)] = &[
    (0x00AD, 0x00AD, "SOFT HYPHEN"),
    (0x034F, 0x034F, "COMBINING GRAPHEME JOINER"),
    (0x0600, 0x0605, "an Arabic number sign, a format character"),
    (0x061C, 0x061C, "ARABIC LETTER MARK"),
    (0x06DD, 0x06DD, "ARABIC END OF AYAH"),
    (0x070F, 0x070F, "SYRIAC ABBREVIATION MARK"),
    (0x0890, 0x0891, "an Arabic currency mark, a format character"),
    (0x08E2, 0x08E2, "ARABIC DISPUTED END OF AYAH"),
    (0x115F, 0x115F, "HANGUL CHOSEONG FILLER"),
    (0x1160, 0x1160, "HANGUL JUNGSEONG FILLER"),
    (0x17B4, 0x17B4, "KHMER VOWEL INHERENT AQ"),
    (0x17B5, 0x17B5, "KHMER VOWEL INHERENT AA"),
    (0x180E, 0x180E, "MONGOLIAN VOWEL SEPARATOR"),
    (0x200B, 0x200B, "ZERO WIDTH SPACE"),
    (0x200C, 0x200C, "ZERO WIDTH NON-JOINER"),
    (0x200D, 0x200D, "ZERO WIDTH JOINER"),
    (0x200E, 0x200E, "LEFT-TO-RIGHT MARK"),
    (0x200F, 0x200F, "RIGHT-TO-LEFT MARK"),
    (0x2028, 0x2028, "LINE SEPARATOR"),
    (0x2029, 0x2029, "PARAGRAPH SEPARATOR"),
    (0x202A, 0x202A, "LEFT-TO-RIGHT EMBEDDING"),
    (0x202B, 0x202B, "RIGHT-TO-LEFT EMBEDDING"),
    (0x202C, 0x202C, "POP DIRECTIONAL FORMATTING"),
    (0x202D, 0x202D, "LEFT-TO-RIGHT OVERRIDE"),
    (0x202E, 0x202E, "RIGHT-TO-LEFT OVERRIDE"),
    (0x2060, 0x2060, "WORD JOINER"),
    (0x2061, 0x2061, "FUNCTION APPLICATION"),
    (0x2062, 0x2062, "INVISIBLE TIMES"),
    (0x2063, 0x2063, "INVISIBLE SEPARATOR"),
    (0x2064, 0x2064, "INVISIBLE PLUS"),
    (0x2065, 0x2065, "an unassigned invisible character"),
    (0x2066, 0x2066, "LEFT-TO-RIGHT ISOLATE"),
    (0x2067, 0x2067, "RIGHT-TO-LEFT ISOLATE"),
    (0x2068, 0x2068, "FIRST STRONG ISOLATE"),
    (0x2069, 0x2069, "POP DIRECTIONAL ISOLATE"),
    (0x206A, 0x206F, "a deprecated format character"),
    (0x3164, 0x3164, "HANGUL FILLER"),
    (0xFEFF, 0xFEFF, "ZERO WIDTH NO-BREAK SPACE"),
    (0xFFA0, 0xFFA0, "HALFWIDTH HANGUL FILLER"),
    (0xFFF0, 0xFFF8, "an unassigned invisible character"),
    (0xFFF9, 0xFFF9, "INTERLINEAR ANNOTATION ANCHOR"),
    (0xFFFA, 0xFFFA, "INTERLINEAR ANNOTATION SEPARATOR"),
    (0xFFFB, 0xFFFB, "INTERLINEAR ANNOTATION TERMINATOR"),
    (0x110BD, 0x110BD, "KAITHI NUMBER SIGN"),
    (0x110CD, 0x110CD, "KAITHI NUMBER SIGN ABOVE"),
    (0x13430, 0x1343F, "an Egyptian hieroglyph format control"),
    (0x1BCA0, 0x1BCA3, "a shorthand format control"),
    (0x1D173, 0x1D17A, "a musical symbol format character"),
    (0xE0000, 0xE0000, "an unassigned invisible character"),
    (0xE0001, 0xE0001, "LANGUAGE TAG"),
    (0xE0002, 0xE001F, "an unassigned invisible character"),
    (0xE0020, 0xE007F, "a TAG character"),
    (0xE0080, 0xE00FF, "an unassigned invisible character"),
    (0xE01F0, 0xE0FFF, "an unassigned invisible character"),
];

fn lookup(c: u32) -> Option<&'static str> {
    let i = INVISIBLE.partition_point(|&(_, end, _)| end < c);
    INVISIBLE.get(i).filter(|&&(start, _, _)| start <= c).map(|&(_, _, name)| name)
}

/// The first character of `s` that a name may not contain (see the module docs), if any.
pub fn forbidden_char(s: &str) -> Option<ForbiddenChar> {
    s.chars().find(|&c| c.is_control() || (c > '\u{7f}' && lookup(c as u32).is_some())).map(ForbiddenChar)
}

/// Why a string cannot be a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameProblem {
    /// It is empty where a name is required.
    Empty,
    /// It is longer than [`MAX_NAME_LEN`] bytes (its length).
    TooLong(usize),
    /// It contains a refused character.
    Forbidden(ForbiddenChar),
}

impl fmt::Display for NameProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameProblem::Empty => f.write_str("must not be empty"),
            NameProblem::TooLong(n) => write!(f, "is {n} bytes long; the limit is {MAX_NAME_LEN}"),
            NameProblem::Forbidden(c) => write!(f, "contains {c}"),
        }
    }
}

impl std::error::Error for NameProblem {}

/// Checks a name, label key or label value: not empty unless `allow_empty`, at most
/// [`MAX_NAME_LEN`] bytes, no [`forbidden_char`].
pub fn check_name(s: &str, allow_empty: bool) -> Result<(), NameProblem> {
    if s.is_empty() && !allow_empty {
        return Err(NameProblem::Empty);
    }
    if s.len() > MAX_NAME_LEN {
        return Err(NameProblem::TooLong(s.len()));
    }
    forbidden_char(s).map_or(Ok(()), |c| Err(NameProblem::Forbidden(c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidi_zero_width_and_control_characters_are_refused_by_name() {
        for (s, message) in [
            ("evil\u{202E}gpj.exe", "contains U+202E (RIGHT-TO-LEFT OVERRIDE)"),
            ("ad\u{200B}min", "contains U+200B (ZERO WIDTH SPACE)"),
            ("a\u{2066}b", "contains U+2066 (LEFT-TO-RIGHT ISOLATE)"),
            ("\u{061C}x", "contains U+061C (ARABIC LETTER MARK)"),
            ("\u{FEFF}root", "contains U+FEFF (ZERO WIDTH NO-BREAK SPACE)"),
            ("a\u{E0041}", "contains U+E0041 (a TAG character)"),
            ("a\u{3164}", "contains U+3164 (HANGUL FILLER)"),
            ("one\ntwo", "contains U+000A (LINE FEED, a control character)"),
            ("a\u{1}", "contains U+0001 (a control character)"),
            ("a\u{2028}b", "contains U+2028 (LINE SEPARATOR)"),
        ] {
            assert_eq!(check_name(s, false).map_err(|e| e.to_string()), Err(message.to_owned()), "{s:?}");
        }
        for c in ('\u{202A}'..='\u{202E}').chain('\u{2066}'..='\u{2069}').chain(['\u{200E}', '\u{200F}']) {
            assert!(forbidden_char(&format!("x{c}")).is_some(), "U+{:04X}", c as u32);
        }
        for c in ['\u{200B}', '\u{200C}', '\u{200D}', '\u{2060}', '\u{FEFF}', '\u{00AD}'] {
            assert!(forbidden_char(&c.to_string()).is_some(), "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn ordinary_names_in_any_script_pass() {
        for s in ["root.prod", "rack-3/row 2", "gpu=a100", "Zoë", "数据", "مرحبا", "❤️", "ok 👍", "a b", ""]
        {
            assert_eq!(check_name(s, true), Ok(()), "{s:?}");
        }
        assert_eq!(check_name("", false), Err(NameProblem::Empty));
        let long = "x".repeat(MAX_NAME_LEN + 1);
        assert_eq!(check_name(&long, false), Err(NameProblem::TooLong(MAX_NAME_LEN + 1)));
        assert_eq!(check_name(&long[1..], false), Ok(()));
    }

    #[test]
    fn the_table_is_sorted_and_disjoint() {
        for w in INVISIBLE.windows(2) {
            assert!(w[0].0 <= w[0].1 && w[0].1 < w[1].0, "{:X?} then {:X?}", w[0], w[1]);
        }
    }
}
