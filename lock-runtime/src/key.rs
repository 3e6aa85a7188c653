//! Lock keys: escaping of argument values, and the limits every key must meet.

use std::fmt::{self, Display, Write};

use crate::LockError;

pub use fencelock_options::MAX_KEY_LEN;

/// One piece of a key template, as the `#[redis_lock]` expansion hands it over.
#[derive(Clone, Copy)]
pub enum KeyPart<'a> {
    /// Literal template text, used as written.
    Text(&'a str),
    /// An argument value, formatted with `Display` and then escaped.
    Value(&'a dyn Display),
}

impl<'a> KeyPart<'a> {
    /// An argument value; the bound gives a type without `Display` a message that says
    /// what to do.
    pub fn value<T: KeyValue>(value: &'a T) -> Self {
        KeyPart::Value(value.as_display())
    }
}

/// A value that can be part of a lock key: anything with `Display`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be part of a lock key: it does not implement `Display`",
    label = "`{Self}` is used in this key template",
    note = "key values are formatted with `Display`: implement it for `{Self}`, name a field that has it (`{{arg.field}}`), or pass a `String`; for an `Option`, pass the value inside it"
)]
pub trait KeyValue {
    /// The value as a `Display` trait object.
    fn as_display(&self) -> &dyn Display;
}

impl<T: Display> KeyValue for T {
    fn as_display(&self) -> &dyn Display {
        self
    }
}

/// Renders a key template: literal text as written, values escaped with [`escape_into`].
/// A value whose `Display` fails gives an error, never a truncated key that another value
/// could share.
pub fn render_key(parts: &[KeyPart<'_>]) -> Result<String, LockError> {
    let mut key = String::new();
    for part in parts {
        match part {
            KeyPart::Text(text) => key.push_str(text),
            KeyPart::Value(value) => {
                write!(EscapingWriter(&mut key), "{value}").map_err(|_| {
                    LockError::invalid_key(
                        key.clone(),
                        "formatting an argument value with Display failed",
                    )
                })?;
            }
        }
    }
    Ok(key)
}

/// The keys of `keys = [...]`, each rendered by [`render_key`]; the first that fails is the
/// error.
pub fn render_keys<const N: usize>(
    keys: [Result<String, LockError>; N],
) -> Result<Vec<String>, LockError> {
    keys.into_iter().collect()
}

/// Appends `value` to `key` with `\`, `:`, `{` and `}` preceded by a backslash, so that a
/// value can never forge the separators of the template around it.
pub fn escape_into(key: &mut String, value: &str) {
    for c in value.chars() {
        if matches!(c, '\\' | ':' | '{' | '}') {
            key.push('\\');
        }
        key.push(c);
    }
}

struct EscapingWriter<'a>(&'a mut String);

impl fmt::Write for EscapingWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        escape_into(self.0, s);
        Ok(())
    }
}

/// Checks the limits of a lock key: not empty, at most [`MAX_KEY_LEN`] bytes, no control
/// characters (NUL, newlines) that would make it unreadable in logs and operator tools.
pub(crate) fn validate(key: &str) -> Result<(), LockError> {
    let reason = if key.is_empty() {
        "a lock key must not be empty; check the template and the argument values that fill it"
            .to_owned()
    } else if key.len() > MAX_KEY_LEN {
        format!(
            "a lock key is at most {MAX_KEY_LEN} bytes and this one has {}; lock on a shorter \
             identifier (an id or a hash of the value)",
            key.len()
        )
    } else if let Some(c) = key.chars().find(|c| c.is_control()) {
        format!(
            "lock keys must not contain control characters, found {c:?}; lock on an id or a \
             hash of the value instead"
        )
    } else {
        return Ok(());
    };
    Err(LockError::invalid_key(
        key.chars().take(80).collect::<String>(),
        reason,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_and_text_is_kept() {
        let sku = "a:b{c}\\d";
        let key = render_key(&[KeyPart::Text("stock:"), KeyPart::Value(&sku)]);
        assert_eq!(key.unwrap(), r"stock:a\:b\{c\}\\d");
    }

    #[test]
    fn a_value_cannot_forge_a_separator() {
        let render = |a: &str, b: &str| {
            render_key(&[KeyPart::Value(&a), KeyPart::Text(":"), KeyPart::Value(&b)]).unwrap()
        };
        assert_ne!(render("1:2", "3"), render("1", "2:3"));
        assert_ne!(render("1\\", ":3"), render("1\\:", "3"));
    }

    #[test]
    fn numbers_render_like_literal_keys() {
        let sku = 42;
        assert_eq!(
            render_key(&[KeyPart::Text("stock:"), KeyPart::Value(&sku)]).unwrap(),
            "stock:42"
        );
    }

    #[test]
    fn a_failing_display_is_an_error_not_a_shorter_key() {
        struct Broken;
        impl Display for Broken {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("partial")?;
                Err(fmt::Error)
            }
        }
        let rendered = render_key(&[KeyPart::Text("k:"), KeyPart::Value(&Broken)]);
        assert!(
            matches!(rendered, Err(LockError::InvalidKey { .. })),
            "{rendered:?}"
        );
    }

    proptest::proptest! {
        /// Distinct argument tuples never render to the same key, whatever the values hold.
        /// Random tuples almost never collide by chance, so the candidates are built to: the
        /// text `a:b` split at each other `:` gives the tuples that an unescaped template
        /// would confuse with `(a, b)`.
        #[test]
        fn distinct_argument_tuples_give_distinct_keys(
            a in r"[a-z:\\{}]{0,6}", b in r"[a-z:\\{}]{0,6}",
        ) {
            let render = |x: &str, y: &str| {
                let parts = [KeyPart::Text("k:"), KeyPart::Value(&x), KeyPart::Text(":"), KeyPart::Value(&y)];
                render_key(&parts).unwrap()
            };
            let joined = format!("{a}:{b}");
            for (at, _) in joined.match_indices(':').filter(|(at, _)| *at != a.len()) {
                let (c, d) = (&joined[..at], &joined[at + 1..]);
                proptest::prop_assert_ne!(render(&a, &b), render(c, d), "({}, {}) vs ({}, {})", a, b, c, d);
            }
        }
    }

    #[test]
    fn limits_are_enforced() {
        assert!(validate("").is_err());
        assert!(validate(&"k".repeat(MAX_KEY_LEN)).is_ok());
        assert!(validate(&"k".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(validate("a\0b").is_err());
        assert!(validate("a\nb").is_err());
        assert!(validate("stock:42 ü").is_ok());
    }
}
