//! Reading a plugin's configuration.
//!
//! The scheduler hands `create` the plugin's TOML table as a JSON object. The SDK stays free of
//! dependencies, so this module holds a small JSON reader ([`Json::parse`]) and [`ConfigObject`],
//! which reads typed settings by key and refuses keys nobody asked for: a typo such as
//! `"polcy"` is an error at load time, not a silently ignored setting.
//!
//! ```
//! use gantry_sdk::config::ConfigObject;
//! let mut c = ConfigObject::parse("my-plugin", r#"{"threshold": 0.6, "mode": "soft"}"#).unwrap();
//! assert_eq!(c.f64("threshold").unwrap(), Some(0.6));
//! assert_eq!(c.str("mode").unwrap(), Some("soft".to_owned()));
//! assert_eq!(c.bool("verbose").unwrap(), None);
//! c.finish(&["threshold", "mode", "verbose"]).unwrap();
//! ```

use crate::PluginError;

/// Deepest nesting [`Json::parse`] accepts; a configuration never needs more, and a bound keeps
/// a hostile input from exhausting the stack.
const MAX_DEPTH: usize = 32;

/// A JSON value. Numbers keep their source text, so integers convert without going through
/// `f64` (which would round values above 2^53).
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, as written.
    Number(String),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Json>),
    /// An object, keys in their order of appearance.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// Parses one JSON document (surrounding whitespace allowed).
    pub fn parse(text: &str) -> Result<Json, String> {
        let mut p = Parser { bytes: text.as_bytes(), pos: 0 };
        p.skip_ws();
        let v = p.value(0)?;
        p.skip_ws();
        if p.pos != p.bytes.len() {
            return Err(p.error("trailing characters after the value"));
        }
        Ok(v)
    }

    /// What kind of value this is, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Number(_) => "a number",
            Json::String(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> String {
        format!("invalid JSON at byte {}: {what}", self.pos)
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, literal: &str) -> bool {
        if self.bytes[self.pos..].starts_with(literal.as_bytes()) {
            self.pos += literal.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, String> {
        if depth > MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        match self.bytes.get(self.pos) {
            None => Err(self.error("unexpected end")),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(Json::String),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) if self.eat("true") => Ok(Json::Bool(true)),
            Some(_) if self.eat("false") => Ok(Json::Bool(false)),
            Some(_) if self.eat("null") => Ok(Json::Null),
            Some(_) => Err(self.error("expected a value")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json, String> {
        self.pos += 1; // '{'
        let mut entries: Vec<(String, Json)> = Vec::new();
        self.skip_ws();
        if self.eat("}") {
            return Ok(Json::Object(entries));
        }
        loop {
            self.skip_ws();
            if self.bytes.get(self.pos) != Some(&b'"') {
                return Err(self.error("expected a key"));
            }
            let key = self.string()?;
            if entries.iter().any(|(k, _)| *k == key) {
                return Err(self.error(&format!("key {key:?} appears twice")));
            }
            self.skip_ws();
            if !self.eat(":") {
                return Err(self.error("expected ':'"));
            }
            self.skip_ws();
            let v = self.value(depth + 1)?;
            entries.push((key, v));
            self.skip_ws();
            if self.eat(",") {
                continue;
            }
            if self.eat("}") {
                return Ok(Json::Object(entries));
            }
            return Err(self.error("expected ',' or '}'"));
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json, String> {
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_ws();
        if self.eat("]") {
            return Ok(Json::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            if self.eat(",") {
                continue;
            }
            if self.eat("]") {
                return Ok(Json::Array(items));
            }
            return Err(self.error("expected ',' or ']'"));
        }
    }

    fn number(&mut self) -> Result<Json, String> {
        let start = self.pos;
        while let Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
        let text =
            core::str::from_utf8(&self.bytes[start..self.pos]).map_err(|_| self.error("bad number"))?;
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Json::Number(text.to_owned())),
            _ => Err(self.error(&format!("bad number {text:?}"))),
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.pos += 1; // '"'
        let mut out = String::new();
        loop {
            let start = self.pos;
            while let Some(&b) = self.bytes.get(self.pos) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            out.push_str(
                core::str::from_utf8(&self.bytes[start..self.pos]).map_err(|_| self.error("bad UTF-8"))?,
            );
            match self.bytes.get(self.pos) {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let esc =
                        self.bytes.get(self.pos).copied().ok_or_else(|| self.error("unexpected end"))?;
                    self.pos += 1;
                    match esc {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => out.push(self.unicode_escape()?),
                        _ => return Err(self.error("bad escape")),
                    }
                }
                Some(_) => return Err(self.error("control character in a string")),
                None => return Err(self.error("unterminated string")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits = self.bytes.get(self.pos..self.pos + 4).ok_or_else(|| self.error("short \\u escape"))?;
        let text = core::str::from_utf8(digits).map_err(|_| self.error("bad \\u escape"))?;
        let v = u32::from_str_radix(text, 16).map_err(|_| self.error("bad \\u escape"))?;
        self.pos += 4;
        Ok(v)
    }

    fn unicode_escape(&mut self) -> Result<char, String> {
        let hi = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&hi) {
            if !self.eat("\\u") {
                return Err(self.error("unpaired surrogate"));
            }
            let lo = self.hex4()?;
            if !(0xDC00..0xE000).contains(&lo) {
                return Err(self.error("unpaired surrogate"));
            }
            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
        } else {
            hi
        };
        char::from_u32(code).ok_or_else(|| self.error("bad \\u escape"))
    }
}

/// A plugin's configuration object, read setting by setting. Every error names the plugin and
/// the key. Call [`ConfigObject::finish`] last: it refuses keys that were never read.
#[derive(Debug)]
pub struct ConfigObject {
    plugin: &'static str,
    entries: Vec<(String, Json)>,
    read: Vec<bool>,
}

impl ConfigObject {
    /// Parses `text`, which must be a JSON object.
    pub fn parse(plugin: &'static str, text: &str) -> Result<ConfigObject, PluginError> {
        match Json::parse(text) {
            Ok(Json::Object(entries)) => {
                let read = vec![false; entries.len()];
                Ok(ConfigObject { plugin, entries, read })
            }
            Ok(other) => Err(PluginError::new(format!(
                "{plugin}: the configuration must be a JSON object, got {}",
                other.kind()
            ))),
            Err(e) => Err(PluginError::new(format!("{plugin}: configuration: {e}"))),
        }
    }

    fn take(&mut self, key: &str) -> Option<&Json> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        self.read[i] = true;
        match &self.entries[i].1 {
            Json::Null => None,
            v => Some(v),
        }
    }

    fn wrong(&self, key: &str, want: &str, got: &Json) -> PluginError {
        PluginError::new(format!("{}: `{key}` must be {want}, got {}", self.plugin, got.kind()))
    }

    /// A string setting (`None` when absent or null).
    pub fn str(&mut self, key: &str) -> Result<Option<String>, PluginError> {
        match self.take(key).cloned() {
            None => Ok(None),
            Some(Json::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong(key, "a string", &v)),
        }
    }

    /// A boolean setting.
    pub fn bool(&mut self, key: &str) -> Result<Option<bool>, PluginError> {
        match self.take(key).cloned() {
            None => Ok(None),
            Some(Json::Bool(b)) => Ok(Some(b)),
            Some(v) => Err(self.wrong(key, "true or false", &v)),
        }
    }

    /// A finite number.
    pub fn f64(&mut self, key: &str) -> Result<Option<f64>, PluginError> {
        match self.take(key).cloned() {
            None => Ok(None),
            Some(Json::Number(n)) => {
                n.parse::<f64>().map(Some).map_err(|_| self.wrong(key, "a number", &Json::Number(n)))
            }
            Some(v) => Err(self.wrong(key, "a number", &v)),
        }
    }

    /// A non-negative integer.
    pub fn u64(&mut self, key: &str) -> Result<Option<u64>, PluginError> {
        match self.take(key).cloned() {
            None => Ok(None),
            Some(Json::Number(n)) => n.parse::<u64>().map(Some).map_err(|_| {
                PluginError::new(format!(
                    "{}: `{key}` must be a whole number from 0 to {}, got {n}",
                    self.plugin,
                    u64::MAX
                ))
            }),
            Some(v) => Err(self.wrong(key, "a whole number", &v)),
        }
    }

    /// A list of strings (`None` when absent or null); an element that is not a string is
    /// refused with its position.
    pub fn str_list(&mut self, key: &str) -> Result<Option<Vec<String>>, PluginError> {
        match self.take(key).cloned() {
            None => Ok(None),
            Some(Json::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Json::String(s) => Ok(s),
                    other => Err(PluginError::new(format!(
                        "{}: `{key}` must be a list of strings, but item {} is {}",
                        self.plugin,
                        i + 1,
                        other.kind()
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(v) => Err(self.wrong(key, "a list of strings", &v)),
        }
    }

    /// Refuses the keys no accessor asked for, naming them and the keys that exist.
    pub fn finish(self, known: &[&str]) -> Result<(), PluginError> {
        let unknown: Vec<&str> =
            self.entries.iter().zip(&self.read).filter(|(_, r)| !**r).map(|((k, _), _)| k.as_str()).collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(PluginError::new(format!(
                "{}: unknown setting{} {}; known settings: {}",
                self.plugin,
                if unknown.len() > 1 { "s" } else { "" },
                unknown.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", "),
                known.join(", ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_json_a_toml_table_becomes() {
        let v =
            Json::parse(r#" {"a": [1, -2.5e3, true, null], "b": {"c": "x\"\u00e9\ud83d\ude00"}} "#).unwrap();
        let Json::Object(e) = v else { panic!("object") };
        assert_eq!(e[0].0, "a");
        assert_eq!(
            e[0].1,
            Json::Array(vec![
                Json::Number("1".into()),
                Json::Number("-2.5e3".into()),
                Json::Bool(true),
                Json::Null
            ])
        );
        assert_eq!(e[1].1, Json::Object(vec![("c".into(), Json::String("x\"é😀".into()))]));
    }

    #[test]
    fn refuses_malformed_documents() {
        for bad in [
            "",
            "{",
            "{\"a\"}",
            "{\"a\":1,}",
            "[1 2]",
            "tru",
            "\"abc",
            "{\"a\":1}x",
            "{\"a\":1,\"a\":2}",
            "1e999",
            "\"\\ud800\"",
            "\"a\u{1}\"",
        ] {
            assert!(Json::parse(bad).is_err(), "{bad:?} accepted");
        }
        let deep = "[".repeat(100) + &"]".repeat(100);
        assert!(Json::parse(&deep).unwrap_err().contains("nested too deeply"));
    }

    #[test]
    fn typed_settings_and_unknown_keys() {
        let mut c = ConfigObject::parse(
            "p",
            r#"{"n": 18446744073709551615, "f": 1.5, "s": "x", "b": false, "z": null}"#,
        )
        .unwrap();
        assert_eq!(c.u64("n").unwrap(), Some(u64::MAX));
        assert_eq!(c.f64("f").unwrap(), Some(1.5));
        assert_eq!(c.str("s").unwrap().as_deref(), Some("x"));
        assert_eq!(c.bool("b").unwrap(), Some(false));
        assert_eq!(c.bool("z").unwrap(), None);
        c.finish(&["n", "f", "s", "b", "z"]).unwrap();

        let mut c = ConfigObject::parse("p", r#"{"n": -1, "s": 3, "typo": 1}"#).unwrap();
        assert!(c.u64("n").unwrap_err().message.contains("`n` must be a whole number"));
        assert!(c.str("s").unwrap_err().message.contains("`s` must be a string, got a number"));
        let e = c.finish(&["n", "s"]).unwrap_err().message;
        assert!(e.contains("unknown setting `typo`") && e.contains("known settings: n, s"), "{e}");

        assert!(ConfigObject::parse("p", "[1]").unwrap_err().message.contains("must be a JSON object"));
    }

    #[test]
    fn lists_of_strings() {
        let mut c =
            ConfigObject::parse("p", r#"{"l": ["a", "b.c"], "e": [], "bad": ["a", 2], "n": "a"}"#).unwrap();
        assert_eq!(c.str_list("l").unwrap(), Some(vec!["a".to_owned(), "b.c".to_owned()]));
        assert_eq!(c.str_list("e").unwrap(), Some(Vec::new()));
        assert_eq!(c.str_list("absent").unwrap(), None);
        let e = c.str_list("bad").unwrap_err().message;
        assert!(e.contains("`bad` must be a list of strings, but item 2 is a number"), "{e}");
        let e = c.str_list("n").unwrap_err().message;
        assert!(e.contains("`n` must be a list of strings, got a string"), "{e}");
    }
}
