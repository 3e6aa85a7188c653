//! The key template of `key = "..."`: literal text with `{argument}` placeholders.
//!
//! This module only reads the template text. Whether a placeholder names an
//! argument of the function is checked in `validate.rs`, which knows the signature.

use std::ops::Range;

/// One piece of a parsed key template.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Literal text, with `{{` and `}}` already turned into `{` and `}`.
    Text(String),
    /// A `{root.field.0}` placeholder.
    Placeholder(Placeholder),
}

/// A placeholder: an argument (or `self`) followed by field accesses.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Placeholder {
    /// The argument name, or `self`.
    pub root: String,
    /// The field accesses after the root, in order.
    pub fields: Vec<Field>,
    /// The byte range of the placeholder, braces included, in the template.
    pub range: Range<usize>,
}

/// One field access of a placeholder.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Field {
    /// `.name`
    Named(String),
    /// `.0`
    Index(u32),
}

/// A problem in the template text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TemplateError {
    /// What is wrong and how to fix it.
    pub message: String,
    /// The byte range of the offending piece in the template.
    pub range: Range<usize>,
}

/// Splits `template` into text and placeholders, reporting every problem found.
pub(crate) fn parse(template: &str) -> Result<Vec<Segment>, Vec<TemplateError>> {
    if template.is_empty() {
        return Err(vec![TemplateError {
            message: "the key template is empty; write the lock key, e.g. `key = \"order:{id}\"`"
                .to_owned(),
            range: 0..0,
        }]);
    }
    let mut parser = TemplateParser {
        template,
        segments: Vec::new(),
        errors: Vec::new(),
        text: String::new(),
        previous: None,
        backslash: false,
    };
    parser.run();
    if parser.errors.is_empty() {
        Ok(parser.segments)
    } else {
        Err(parser.errors)
    }
}

struct TemplateParser<'a> {
    template: &'a str,
    segments: Vec<Segment>,
    errors: Vec<TemplateError>,
    /// Literal text not yet pushed as a segment.
    text: String,
    /// The last placeholder, unless literal text containing `:` followed it.
    previous: Option<Range<usize>>,
    /// A `\` came after the last placeholder, before any `:`: a `:` after it does not
    /// separate (a value ending in `\` would pair with it).
    backslash: bool,
}

impl TemplateParser<'_> {
    fn run(&mut self) {
        let mut at = 0;
        while let Some(ch) = self.template[at..].chars().next() {
            let rest = &self.template[at..];
            at = if rest.starts_with("{{") {
                self.text.push('{');
                at + 2
            } else if rest.starts_with("}}") {
                self.text.push('}');
                at + 2
            } else if rest.starts_with('}') {
                self.error(
                    format!(
                        "unmatched `}}` at the end of `{}`; write `}}}}` for a literal brace",
                        &self.template[..=at]
                    ),
                    at..at + 1,
                );
                at + 1
            } else if rest.starts_with('{') {
                self.placeholder(at)
            } else {
                if ch == '\\' && self.previous.is_some() {
                    self.backslash = true;
                }
                if ch == ':' && !self.backslash {
                    self.previous = None;
                }
                self.text.push(ch);
                at + ch.len_utf8()
            };
        }
        self.flush_text();
    }

    /// Reads the placeholder opening at `open` and returns where parsing resumes.
    fn placeholder(&mut self, open: usize) -> usize {
        let content_start = open + 1;
        // A `{` before the closing `}` means this placeholder was never closed.
        let end = self.template[content_start..]
            .find(['{', '}'])
            .map(|offset| content_start + offset);
        let Some(close) = end.filter(|&close| self.template.as_bytes()[close] == b'}') else {
            let stop = end.unwrap_or(self.template.len());
            self.error(
                format!(
                    "unclosed `{{` in `{}`; close the placeholder with `}}`, or write `{{{{` for a literal brace",
                    &self.template[open..stop]
                ),
                open..stop,
            );
            self.previous = None;
            return stop;
        };
        let range = open..close + 1;
        self.flush_text();
        let written = &self.template[range.clone()];
        match parse_path(&self.template[content_start..close]) {
            Err(PathError::Empty) => {
                self.error(
                    "empty placeholder `{}`; name a function argument, e.g. `{id}`, or write `{{}}` for literal braces".to_owned(),
                    range.clone(),
                );
                self.previous = None;
            }
            Err(PathError::Invalid) => {
                self.error(
                    format!(
                        "invalid placeholder `{written}`; write an argument name, optionally followed by fields, e.g. `{{id}}`, `{{order.id}}` or `{{self.id}}` (no spaces or format specs)"
                    ),
                    range.clone(),
                );
                self.previous = None;
            }
            Ok((root, fields)) => {
                if let Some(previous) = self.previous.take() {
                    let first = &self.template[previous.clone()];
                    let message = if self.backslash {
                        format!(
                            "a `\\` before the `:` between `{first}` and `{written}` lets argument values forge the separator (a value's own `:` is escaped as `\\:`); remove the backslash, e.g. `{first}:{written}`"
                        )
                    } else {
                        format!(
                            "placeholders `{first}` and `{written}` must be separated by literal text containing `:` (e.g. `{first}:{written}`): argument values have `:` escaped, so only a `:` keeps distinct arguments from forming the same key"
                        )
                    };
                    self.error(message, previous.start..range.end);
                }
                self.previous = Some(range.clone());
                self.backslash = false;
                self.segments.push(Segment::Placeholder(Placeholder {
                    root,
                    fields,
                    range: range.clone(),
                }));
            }
        }
        range.end
    }

    fn flush_text(&mut self) {
        if !self.text.is_empty() {
            self.segments
                .push(Segment::Text(std::mem::take(&mut self.text)));
        }
    }

    fn error(&mut self, message: String, range: Range<usize>) {
        self.errors.push(TemplateError { message, range });
    }
}

enum PathError {
    Empty,
    Invalid,
}

/// Reads `root.field.0`: an identifier or `self`, then `.identifier` or `.index` accesses.
fn parse_path(path: &str) -> Result<(String, Vec<Field>), PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    let mut pieces = path.split('.');
    let root = pieces
        .next()
        .filter(|root| is_identifier(root))
        .ok_or(PathError::Invalid)?;
    let fields = pieces
        .map(|piece| {
            // Names no field can have, not even raw (`r#type` is a field's name).
            let unnameable = ["self", "super", "crate", "Self"].contains(&piece);
            if is_identifier(piece) && !unnameable {
                Ok(Field::Named(piece.to_owned()))
            } else {
                tuple_index(piece)
                    .map(Field::Index)
                    .ok_or(PathError::Invalid)
            }
        })
        .collect::<Result<_, _>>()?;
    Ok((root.to_owned(), fields))
}

/// ASCII identifiers only: placeholders are emitted as Rust tokens, and this
/// keeps every accepted name a valid one.
fn is_identifier(piece: &str) -> bool {
    let mut chars = piece.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
        && piece != "_"
}

/// A tuple field index as Rust writes it: digits without leading zeros.
fn tuple_index(piece: &str) -> Option<u32> {
    let canonical = piece == "0" || !piece.starts_with('0');
    let digits = !piece.is_empty() && piece.bytes().all(|byte| byte.is_ascii_digit());
    if canonical && digits {
        piece.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(text: &str) -> Segment {
        Segment::Text(text.to_owned())
    }

    fn placeholder(root: &str, fields: Vec<Field>, range: Range<usize>) -> Segment {
        Segment::Placeholder(Placeholder {
            root: root.to_owned(),
            fields,
            range,
        })
    }

    fn named(name: &str) -> Field {
        Field::Named(name.to_owned())
    }

    /// The single error of `template`, as (message, offending text).
    fn single_error(template: &str) -> (String, &str) {
        let errors = parse(template).expect_err(template);
        assert_eq!(errors.len(), 1, "{errors:?}");
        let TemplateError { message, range } = errors.into_iter().next().unwrap();
        (message, &template[range])
    }

    #[test]
    fn text_only() {
        assert_eq!(parse("global-lock"), Ok(vec![text("global-lock")]));
    }

    #[test]
    fn text_then_placeholder() {
        assert_eq!(
            parse("stock:{sku}"),
            Ok(vec![text("stock:"), placeholder("sku", vec![], 6..11)])
        );
    }

    #[test]
    fn placeholders_separated_by_colons() {
        assert_eq!(
            parse("{tenant}:order:{id}:v2"),
            Ok(vec![
                placeholder("tenant", vec![], 0..8),
                text(":order:"),
                placeholder("id", vec![], 15..19),
                text(":v2"),
            ])
        );
    }

    #[test]
    fn colon_anywhere_in_the_separator_is_enough() {
        assert!(parse("{a}-x:y-{b}").is_ok());
    }

    #[test]
    fn field_paths() {
        assert_eq!(
            parse("order:{order.id}:{pair.0}:{a.b.1.c}"),
            Ok(vec![
                text("order:"),
                placeholder("order", vec![named("id")], 6..16),
                text(":"),
                placeholder("pair", vec![Field::Index(0)], 17..25),
                text(":"),
                placeholder("a", vec![named("b"), Field::Index(1), named("c")], 26..35),
            ])
        );
    }

    #[test]
    fn self_and_self_fields() {
        assert_eq!(
            parse("user:{self.id}"),
            Ok(vec![
                text("user:"),
                placeholder("self", vec![named("id")], 5..14)
            ])
        );
        assert_eq!(parse("{self}"), Ok(vec![placeholder("self", vec![], 0..6)]));
    }

    #[test]
    fn underscores_and_digits_in_names() {
        assert_eq!(
            parse("{_id}:{item_2}"),
            Ok(vec![
                placeholder("_id", vec![], 0..5),
                text(":"),
                placeholder("item_2", vec![], 6..14),
            ])
        );
    }

    #[test]
    fn doubled_braces_are_literal_and_merge_with_text() {
        assert_eq!(
            parse("a{{b}}c:{id}:}}"),
            Ok(vec![
                text("a{b}c:"),
                placeholder("id", vec![], 8..12),
                text(":}"),
            ])
        );
        assert_eq!(parse("{{}}"), Ok(vec![text("{}")]));
    }

    #[test]
    fn placeholder_followed_by_closing_literal_brace() {
        assert_eq!(
            parse("{{{id}}}"),
            Ok(vec![text("{"), placeholder("id", vec![], 2..6), text("}")])
        );
    }

    #[test]
    fn non_ascii_text_is_kept() {
        assert_eq!(
            parse("café:{id}:ü"),
            Ok(vec![
                text("café:"),
                placeholder("id", vec![], 6..10),
                text(":ü"),
            ])
        );
    }

    #[test]
    fn empty_template() {
        let (message, piece) = single_error("");
        assert_eq!(
            message,
            "the key template is empty; write the lock key, e.g. `key = \"order:{id}\"`"
        );
        assert_eq!(piece, "");
    }

    #[test]
    fn unclosed_brace_at_end() {
        let (message, piece) = single_error("order:{id");
        assert_eq!(
            message,
            "unclosed `{` in `{id`; close the placeholder with `}`, or write `{{` for a literal brace"
        );
        assert_eq!(piece, "{id");
    }

    #[test]
    fn unclosed_brace_before_another_placeholder() {
        let errors = parse("{a:{b}").expect_err("unclosed");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].range, 0..3);
        assert!(errors[0].message.starts_with("unclosed `{` in `{a:`"));
    }

    #[test]
    fn lone_opening_brace() {
        let (message, piece) = single_error("a:{");
        assert!(message.starts_with("unclosed `{` in `{`"), "{message}");
        assert_eq!(piece, "{");
    }

    #[test]
    fn unmatched_closing_brace() {
        let (message, piece) = single_error("a:{id}x}y");
        assert_eq!(
            message,
            "unmatched `}` at the end of `a:{id}x}`; write `}}` for a literal brace"
        );
        assert_eq!(piece, "}");
    }

    #[test]
    fn unmatched_closing_brace_at_start() {
        let (message, piece) = single_error("}a");
        assert_eq!(
            message,
            "unmatched `}` at the end of `}`; write `}}` for a literal brace"
        );
        assert_eq!(piece, "}");
    }

    #[test]
    fn empty_placeholder() {
        let (message, piece) = single_error("order:{}");
        assert_eq!(
            message,
            "empty placeholder `{}`; name a function argument, e.g. `{id}`, or write `{{}}` for literal braces"
        );
        assert_eq!(piece, "{}");
    }

    #[test]
    fn invalid_placeholders() {
        for (template, piece) in [
            ("a:{id:?}", "{id:?}"),
            ("a:{ id }", "{ id }"),
            ("a:{a b}", "{a b}"),
            ("a:{1abc}", "{1abc}"),
            ("a:{_}", "{_}"),
            ("a:{a.}", "{a.}"),
            ("a:{.a}", "{.a}"),
            ("a:{a..b}", "{a..b}"),
            ("a:{a.01}", "{a.01}"),
            ("a:{a.self}", "{a.self}"),
            ("a:{a.super}", "{a.super}"),
            ("a:{a.crate}", "{a.crate}"),
            ("a:{a.Self}", "{a.Self}"),
            ("a:{a-b}", "{a-b}"),
            ("a:{a::b}", "{a::b}"),
            ("a:{é}", "{é}"),
            ("a:{a.99999999999}", "{a.99999999999}"),
        ] {
            let (message, offending) = single_error(template);
            assert_eq!(
                message,
                format!(
                    "invalid placeholder `{piece}`; write an argument name, optionally followed by fields, e.g. `{{id}}`, `{{order.id}}` or `{{self.id}}` (no spaces or format specs)"
                ),
            );
            assert_eq!(offending, piece);
        }
    }

    #[test]
    fn adjacent_placeholders() {
        let (message, piece) = single_error("{a}{b}");
        assert_eq!(
            message,
            "placeholders `{a}` and `{b}` must be separated by literal text containing `:` (e.g. `{a}:{b}`): argument values have `:` escaped, so only a `:` keeps distinct arguments from forming the same key"
        );
        assert_eq!(piece, "{a}{b}");
    }

    #[test]
    fn placeholders_separated_without_colon() {
        let (message, piece) = single_error("k:{order.id}-{{x}}-{self.n}");
        assert!(
            message.starts_with(
                "placeholders `{order.id}` and `{self.n}` must be separated by literal text containing `:` (e.g. `{order.id}:{self.n}`)"
            ),
            "{message}"
        );
        assert_eq!(piece, "{order.id}-{{x}}-{self.n}");
    }

    #[test]
    fn a_backslash_before_the_colon_does_not_separate() {
        let (message, piece) = single_error(r"{a}\:{b}");
        assert_eq!(
            message,
            r"a `\` before the `:` between `{a}` and `{b}` lets argument values forge the separator (a value's own `:` is escaped as `\:`); remove the backslash, e.g. `{a}:{b}`"
        );
        assert_eq!(piece, r"{a}\:{b}");
        assert!(parse(r"{a}:\{b}").is_ok(), "after the `:` it does no harm");
        assert!(
            parse(r"k\:{a}").is_ok(),
            "nor in text before the first placeholder"
        );
    }

    #[test]
    fn every_pair_without_colon_is_reported() {
        let errors = parse("{a}{b}{c}").expect_err("adjacent");
        let ranges: Vec<_> = errors.into_iter().map(|error| error.range).collect();
        assert_eq!(ranges, [0..6, 3..9]);
    }

    #[test]
    fn all_errors_are_collected() {
        let errors = parse("}{}:{a b}:{x").expect_err("several errors");
        let ranges: Vec<_> = errors.into_iter().map(|error| error.range).collect();
        assert_eq!(ranges, [0..1, 1..3, 4..9, 10..12]);
    }
}
