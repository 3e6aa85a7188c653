//! Glob patterns over lock keys, as Redis reads them (`SCAN MATCH`, `KEYS`): `*` any text,
//! `?` any one byte, `[abc]`, `[a-z]` and `[^abc]` one byte of (or not of) a set, `\x` the
//! byte `x` itself. Matched over bytes, as Redis matches, so that every backend lists the
//! same keys for a pattern.

use crate::LockError;

/// A parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Glob {
    tokens: Vec<Token>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Byte(u8),
    AnyOne,
    Any,
    /// One byte in (or, `negated`, not in) one of the inclusive ranges.
    Class {
        negated: bool,
        ranges: Vec<(u8, u8)>,
    },
}

/// Bytes with a meaning in a pattern outside a class.
const SPECIAL: &[u8] = b"*?[]\\";
/// Bytes with a meaning inside a class.
const SPECIAL_IN_CLASS: &[u8] = b"]\\-^";

impl Glob {
    /// Parses `pattern`; refuses an empty one, control characters and an unclosed `[`.
    pub(crate) fn parse(pattern: &str) -> Result<Glob, LockError> {
        let refuse = |reason: &str| Err(LockError::invalid_key(pattern, reason));
        if pattern.is_empty() {
            return refuse("a key pattern must not be empty; `*` matches every key");
        }
        if pattern.chars().any(char::is_control) {
            return refuse("a key pattern must not contain control characters");
        }
        let mut bytes = pattern.bytes().peekable();
        let mut tokens = Vec::new();
        while let Some(byte) = bytes.next() {
            let token = match byte {
                b'*' => Token::Any,
                b'?' => Token::AnyOne,
                // A trailing backslash stands for itself, as in Redis.
                b'\\' => Token::Byte(bytes.next().unwrap_or(b'\\')),
                b'[' => {
                    let negated = bytes.next_if_eq(&b'^').is_some();
                    let mut ranges = Vec::new();
                    loop {
                        let low = match bytes.next() {
                            None => {
                                return refuse(
                                    "the pattern has an unclosed `[`; close the set with `]`, \
                                     or match the character itself with `\\[`",
                                );
                            }
                            Some(b']') => break,
                            // An escaped byte is that byte alone, never a range's start.
                            Some(b'\\') => {
                                let byte = bytes.next().unwrap_or(b'\\');
                                ranges.push((byte, byte));
                                continue;
                            }
                            Some(low) => low,
                        };
                        // Redis takes the byte after `-` as it is: a backslash there ends the
                        // range, and escapes nothing.
                        let high = match bytes.next_if_eq(&b'-') {
                            Some(_) => match bytes.next() {
                                Some(b'\\') => {
                                    return refuse(
                                        "a range in `[...]` cannot end in an escaped \
                                         character (Redis reads the backslash as the end): \
                                         write the end unescaped, or list the characters",
                                    );
                                }
                                Some(high) => high,
                                None => low,
                            },
                            None => low,
                        };
                        ranges.push((low.min(high), low.max(high)));
                    }
                    Token::Class { negated, ranges }
                }
                byte => Token::Byte(byte),
            };
            tokens.push(token);
        }
        Ok(Glob { tokens })
    }

    /// Whether `text` matches, over its bytes.
    pub(crate) fn matches(&self, text: &str) -> bool {
        let (tokens, text) = (&self.tokens, text.as_bytes());
        let (mut t, mut p) = (0, 0);
        // Where to resume after the last `*`: the token after it, and the text it took so far.
        let mut star: Option<(usize, usize)> = None;
        while t < text.len() {
            match tokens.get(p) {
                Some(Token::Any) => {
                    star = Some((p + 1, t));
                    p += 1;
                }
                Some(token) if token.matches_byte(text[t]) => {
                    t += 1;
                    p += 1;
                }
                _ => match star {
                    Some((after, taken)) => {
                        star = Some((after, taken + 1));
                        p = after;
                        t = taken + 1;
                    }
                    None => return false,
                },
            }
        }
        tokens[p..].iter().all(|token| *token == Token::Any)
    }

    /// The pattern as Redis reads it, for `SCAN MATCH`, from token `from` on.
    fn render_from(&self, from: usize) -> Vec<u8> {
        let mut rendered = Vec::new();
        for token in self.tokens.iter().skip(from) {
            match token {
                Token::Byte(byte) => push_escaped(&mut rendered, *byte, SPECIAL),
                Token::AnyOne => rendered.push(b'?'),
                Token::Any => rendered.push(b'*'),
                Token::Class { negated, ranges } => {
                    rendered.extend(render_class(*negated, ranges));
                }
            }
        }
        rendered
    }

    /// The pattern as Redis reads it (a trailing backslash escaped).
    pub(crate) fn render(&self) -> Vec<u8> {
        self.render_from(0)
    }

    /// How the pattern begins.
    pub(crate) fn start(&self) -> Start {
        match self.tokens.first() {
            Some(Token::Byte(byte)) => Start::Byte(*byte),
            Some(Token::Any) | None => Start::Any,
            Some(Token::AnyOne | Token::Class { .. }) => Start::OneOf,
        }
    }

    /// The pattern as Redis reads it, with its first token (one byte of several) made `*`.
    pub(crate) fn render_with_any_first(&self) -> Vec<u8> {
        [b"*".as_slice(), &self.render_from(1)].concat()
    }
}

/// How a pattern begins: what a text it matches can start with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// This byte.
    Byte(u8),
    /// Anything (`*`).
    Any,
    /// One byte of a set (`?`, `[...]`).
    OneOf,
}

impl Token {
    fn matches_byte(&self, byte: u8) -> bool {
        match self {
            Token::Byte(expected) => *expected == byte,
            Token::AnyOne => true,
            Token::Any => false,
            Token::Class { negated, ranges } => {
                let within = ranges
                    .iter()
                    .any(|&(low, high)| (low..=high).contains(&byte));
                within != *negated
            }
        }
    }
}

/// A class as Redis reads it: single bytes escaped, a range's ends as they are (Redis takes
/// them so). Where Redis would read it otherwise, `?`, wider, for the caller to filter: a byte
/// of a UTF-8 sequence (Redis compares range ends as signed bytes), a range starting with `^`
/// in first place (a negation to Redis) or with `]` (the class's end to Redis).
fn render_class(negated: bool, ranges: &[(u8, u8)]) -> Vec<u8> {
    let beyond_ascii = ranges.iter().any(|&(_, high)| !high.is_ascii());
    let is_range = |&(low, high): &(u8, u8)| low != high;
    let caret_first = !negated && ranges.first().is_some_and(|r| is_range(r) && r.0 == b'^');
    let bracket = ranges.iter().any(|r| is_range(r) && r.0 == b']');
    if beyond_ascii || caret_first || bracket {
        return b"?".to_vec();
    }
    let mut rendered = vec![b'['];
    if negated {
        rendered.push(b'^');
    }
    for &(low, high) in ranges {
        if high == low {
            push_escaped(&mut rendered, low, SPECIAL_IN_CLASS);
        } else {
            rendered.extend([low, b'-', high]);
        }
    }
    rendered.push(b']');
    rendered
}

fn push_escaped(rendered: &mut Vec<u8>, byte: u8, special: &[u8]) {
    if special.contains(&byte) {
        rendered.push(b'\\');
    }
    rendered.push(byte);
}

/// `text` with every glob character escaped: a pattern matching exactly `text`.
pub(crate) fn escape(text: &str) -> String {
    let mut escaped = Vec::with_capacity(text.len());
    for byte in text.bytes() {
        push_escaped(&mut escaped, byte, SPECIAL);
    }
    String::from_utf8_lossy(&escaped).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, text: &str) -> bool {
        Glob::parse(pattern).unwrap().matches(text)
    }

    #[test]
    fn patterns_match_as_in_redis() {
        assert!(matches("*", "stock:42"));
        assert!(matches("stock:*", "stock:42"));
        assert!(!matches("stock:*", "order:42"));
        assert!(matches("*:42", "stock:42"));
        assert!(matches("s?ock:4[0-9]", "stock:42"));
        assert!(!matches("stock:4[^0-9]", "stock:42"));
        assert!(matches("stock:4[^a-z]", "stock:42"));
        assert!(matches("a*b*c", "aXbYbZc"));
        assert!(!matches("a*b*c", "aXbYbZ"));
        assert!(matches(r"\*", "*"));
        assert!(!matches(r"\*", "x"));
        assert!(
            matches(r"a\", r"a\"),
            "a trailing backslash stands for itself"
        );
        assert!(matches("[z-a]", "m"), "a reversed range is the same range");
        assert!(matches(r"[\]]", "]"));
        assert!(!matches("?", "ü"), "`?` is one byte, as in Redis");
        assert!(matches("??", "ü"));
        assert!(matches("{*", "{a"));
    }

    #[test]
    fn bad_patterns_are_refused_with_the_fix() {
        for (pattern, says) in [("", "`*`"), ("[ab", r"`\[`"), ("a\nb", "control")] {
            match Glob::parse(pattern) {
                Err(LockError::InvalidKey { reason, .. }) => {
                    assert!(reason.contains(says), "{pattern:?}: {reason}")
                }
                other => panic!("{pattern:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn escapes_and_range_ends_are_read_as_redis_reads_them() {
        // `\]` is one byte, not a range's start: `[\]-a]` is `]`, `-` and `a`.
        assert!(matches(r"x[\]-a]", "x]") && matches(r"x[\]-a]", "x-"));
        assert!(!matches(r"x[\]-a]", "x_"), "`_` lies between `]` and `a`");
        let refused = Glob::parse(r"x[a-\]]");
        assert!(
            matches!(refused, Err(LockError::InvalidKey { .. })),
            "{refused:?}"
        );
        // Sent to SCAN as `?` where Redis would read the class otherwise; filtered here.
        for (pattern, sent) in [
            ("x[a-é]", "x?"),
            ("x[a-]]", "x?"),
            ("x[^-a]", r"x[^\-a]"),
            ("x[b^-c]", "x[b^-c]"),
        ] {
            let rendered = Glob::parse(pattern).unwrap().render();
            assert_eq!(String::from_utf8(rendered).unwrap(), sent, "{pattern}");
        }
        assert!(matches("x[a-é]", "xb"));
    }

    #[test]
    fn rendering_gives_back_what_redis_reads() {
        for pattern in ["stock:*", r"a\*b", "[^a-c]x?", r"[\]\-]", "ü*"] {
            let glob = Glob::parse(pattern).unwrap();
            let rendered = String::from_utf8(glob.render()).unwrap();
            assert_eq!(Glob::parse(&rendered).unwrap(), glob, "{pattern}");
        }
        assert_eq!(Glob::parse(r"a\").unwrap().render(), br"a\\");
        assert_eq!(escape("a*b?[c]\\"), r"a\*b\?\[c\]\\");
    }
}
