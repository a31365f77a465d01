//! The string arena behind every `GantryStrRef` of a view: strings are interned, so equal
//! strings share one reference and plugins compare labels by reference.

use crate::det_hash::DetHashMap;
use gantry_sdk::abi::GantryStrRef;

/// An append-only arena of interned UTF-8 strings.
#[derive(Debug, Default, Clone)]
pub struct StringArena {
    bytes: Vec<u8>,
    index: DetHashMap<Box<str>, GantryStrRef>,
}

impl StringArena {
    /// The reference for `s`, adding it if new. The empty string is always `{0, 0}`.
    pub fn intern(&mut self, s: &str) -> GantryStrRef {
        if s.is_empty() {
            return GantryStrRef::default();
        }
        if let Some(r) = self.index.get(s) {
            return *r;
        }
        let r = GantryStrRef { offset: self.bytes.len() as u32, len: s.len() as u32 };
        self.bytes.extend_from_slice(s.as_bytes());
        self.index.insert(s.into(), r);
        r
    }

    /// The reference for `s` if it was interned.
    pub fn lookup(&self, s: &str) -> Option<GantryStrRef> {
        if s.is_empty() {
            return Some(GantryStrRef::default());
        }
        self.index.get(s).copied()
    }

    /// The text of a reference made by this arena.
    pub fn get(&self, r: GantryStrRef) -> &str {
        let start = r.offset as usize;
        self.bytes.get(start..start + r.len as usize).and_then(|b| std::str::from_utf8(b).ok()).unwrap_or("")
    }

    /// The arena's bytes, as the view exposes them.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_shares_references() {
        let mut a = StringArena::default();
        let x = a.intern("rack-1");
        let y = a.intern("gpu");
        assert_eq!(a.intern("rack-1"), x);
        assert_ne!(x, y);
        assert_eq!(a.get(x), "rack-1");
        assert_eq!(a.get(y), "gpu");
        assert_eq!(a.intern(""), GantryStrRef::default());
        assert_eq!(a.lookup("nope"), None);
    }
}
