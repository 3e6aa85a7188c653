//! The arguments inside `#[redis_lock(...)]`.
//!
//! Each argument is read on its own here: its syntax, its type and its range.
//! Checks that need the function (placeholders) or several arguments
//! (`retry` with `GiveUp`) live in `validate.rs`.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::meta::ParseNestedMeta;
use syn::parse::{ParseStream, Parser};
use syn::{Expr, Ident, Lit, LitStr, Path, Token};

use crate::errors::Errors;

/// The longest lease or pause the runtime accepts (its `MAX_TTL_MS`): 24 h.
const MAX_MILLISECONDS: u64 = 86_400_000;

/// The arguments as written; `None` for those left out.
#[derive(Default)]
pub(crate) struct LockArgs {
    pub key: Option<Arg<LitStr>>,
    pub ttl_ms: Option<Arg<Number<u64>>>,
    pub retry: Option<Arg<Number<u32>>>,
    pub sleep_ms: Option<Arg<Number<u64>>>,
    pub action: Option<Arg<Action>>,
    pub client: Option<Arg<Expr>>,
    pub crate_path: Option<Arg<Path>>,
}

/// One argument: its name as written (for spans) and its value.
pub(crate) struct Arg<T> {
    pub name: Ident,
    pub value: T,
}

/// An integer argument and the span of its literal.
pub(crate) struct Number<T> {
    pub value: T,
    pub span: Span,
}

/// What to do when the lock is held by someone else.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// One attempt, then fail.
    GiveUp,
    /// Keep trying, `retry` times, pausing up to `sleep_ms` between attempts.
    Continue,
}

/// One accepted argument: how it is written and where its value goes.
struct ArgumentSpec {
    name: &'static str,
    /// Shown when the argument is written without a value.
    example: &'static str,
    /// The error when the argument is left out, for required arguments.
    missing: Option<&'static str>,
    /// Reads the value and stores it in its field of `LockArgs`.
    store: fn(&mut LockArgs, Ident, Expr) -> syn::Result<()>,
}

/// Every argument, in the order they are listed in messages. A new argument
/// is one row here plus one field in `LockArgs`.
const ARGUMENTS: &[ArgumentSpec] = &[
    ArgumentSpec {
        name: "key",
        example: "key = \"order:{id}\"",
        missing: Some(
            "missing `key = \"...\"`: the lock key template, e.g. `key = \"order:{id}\"`",
        ),
        store: |args, name, value| store(&mut args.key, name, key_template(&value)),
    },
    ArgumentSpec {
        name: "ttl_ms",
        example: "ttl_ms = 10_000",
        missing: None,
        store: |args, name, value| {
            let number = milliseconds(
                &name,
                &value,
                "a lease of 0 ms expires before it is granted",
            );
            store(&mut args.ttl_ms, name, number)
        },
    },
    ArgumentSpec {
        name: "retry",
        example: "retry = 5",
        missing: None,
        store: |args, name, value| {
            let number = number(&name, &value, "u32", |value: u64| {
                u32::try_from(value).map_err(|_| {
                    format!(
                        "`retry` must be at most {}; use a smaller number of attempts",
                        u32::MAX
                    )
                })
            });
            store(&mut args.retry, name, number)
        },
    },
    ArgumentSpec {
        name: "sleep_ms",
        example: "sleep_ms = 200",
        missing: None,
        store: |args, name, value| {
            let number = milliseconds(
                &name,
                &value,
                "a pause of 0 ms between attempts makes the retries a busy loop",
            );
            store(&mut args.sleep_ms, name, number)
        },
    },
    ArgumentSpec {
        name: "action",
        example: "action = GiveUp",
        missing: None,
        store: |args, name, value| store(&mut args.action, name, action(&value)),
    },
    ArgumentSpec {
        name: "client",
        example: "client = self.locks",
        missing: None,
        store: |args, name, value| store(&mut args.client, name, Ok(value)),
    },
    ArgumentSpec {
        name: "crate",
        example: "crate = \"fencelock\"",
        missing: None,
        store: |args, name, value| store(&mut args.crate_path, name, crate_path(&value)),
    },
];

/// Reads the attribute's arguments, recording every problem in `errors`.
pub(crate) fn parse(attr: TokenStream, errors: &mut Errors) -> LockArgs {
    let mut args = LockArgs::default();
    let mut written = Vec::new();
    let parser = syn::meta::parser(|meta| parse_argument(&mut args, &mut written, &meta, errors));
    match parser.parse2(attr) {
        // A syntax error stopped the parser; the problems with names and
        // values were recorded by `parse_argument` as it went.
        Err(error) => errors.push(error),
        // Only now is it known that a required argument was left out, rather
        // than written with a bad value or lost after a syntax error.
        Ok(()) => {
            for spec in ARGUMENTS {
                if let (Some(message), false) = (spec.missing, written.contains(&spec.name)) {
                    errors.push(syn::Error::new(Span::call_site(), message));
                }
            }
        }
    }
    args
}

/// Reads one `name = value`. Problems with the name or the value are recorded
/// and parsing goes on with the next argument; only broken syntax stops it.
fn parse_argument(
    args: &mut LockArgs,
    written: &mut Vec<&'static str>,
    meta: &ParseNestedMeta,
    errors: &mut Errors,
) -> syn::Result<()> {
    let name = path_text(&meta.path);
    let Some(spec) = ARGUMENTS.iter().find(|spec| spec.name == name) else {
        let expected: Vec<_> = ARGUMENTS.iter().map(|spec| spec.name).collect();
        errors.push(syn::Error::new_spanned(
            &meta.path,
            format!(
                "unknown argument `{name}`; expected one of: {}",
                expected.join(", ")
            ),
        ));
        return skip_argument(meta.input);
    };
    written.push(spec.name);
    if !meta.input.peek(Token![=]) {
        errors.push(syn::Error::new_spanned(
            &meta.path,
            format!("`{name}` needs a value, e.g. `{}`", spec.example),
        ));
        return skip_argument(meta.input);
    }
    let value: Expr = meta.value()?.parse()?;
    let ident = meta.path.require_ident()?.clone();
    errors.collect((spec.store)(args, ident, value));
    Ok(())
}

/// The argument name as written, for lookups and messages.
fn path_text(path: &Path) -> String {
    let segments: Vec<_> = path
        .segments
        .iter()
        .map(|segment| segment.ident.unraw().to_string())
        .collect();
    segments.join("::")
}

/// Consumes the rest of an argument that cannot be used, up to the next `,`.
fn skip_argument(input: ParseStream) -> syn::Result<()> {
    while !input.is_empty() && !input.peek(Token![,]) {
        input.parse::<TokenTree>()?;
    }
    Ok(())
}

/// Stores a value, unless the argument was given before.
fn store<T>(slot: &mut Option<Arg<T>>, name: Ident, value: syn::Result<T>) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(
            name.span(),
            format!("duplicate argument `{name}`; remove one of them"),
        ));
    }
    *slot = Some(Arg {
        name,
        value: value?,
    });
    Ok(())
}

/// Looks through the invisible groups that `macro_rules!` puts around `$value:expr`.
fn ungrouped(mut expr: &Expr) -> &Expr {
    while let Expr::Group(group) = expr {
        expr = &group.expr;
    }
    expr
}

fn key_template(value: &Expr) -> syn::Result<LitStr> {
    match ungrouped(value) {
        Expr::Lit(literal) => match &literal.lit {
            Lit::Str(template) => Ok(template.clone()),
            _ => Err(not_a_template(value)),
        },
        _ => Err(not_a_template(value)),
    }
}

fn not_a_template(value: &Expr) -> syn::Error {
    syn::Error::new_spanned(
        value,
        "`key` must be a string literal template, e.g. `key = \"order:{id}\"`",
    )
}

/// A duration in milliseconds: at least 1 and at most a day.
fn milliseconds(name: &Ident, value: &Expr, why_not_zero: &str) -> syn::Result<Number<u64>> {
    number(name, value, "u64", |value: u64| {
        if value == 0 {
            Err(format!("`{name}` must be greater than 0: {why_not_zero}"))
        } else if value > MAX_MILLISECONDS {
            Err(format!(
                "`{name}` must be at most 86_400_000 (24 h), the longest the runtime accepts; use a smaller value"
            ))
        } else {
            Ok(value)
        }
    })
}

/// An integer literal, checked by `check`. `suffix` is the one type suffix
/// allowed; any other (`10s`, `5i8`) is rejected rather than ignored.
fn number<T>(
    name: &Ident,
    value: &Expr,
    suffix: &str,
    check: impl FnOnce(u64) -> Result<T, String>,
) -> syn::Result<Number<T>> {
    let Expr::Lit(literal) = ungrouped(value) else {
        return Err(not_an_integer(name, value));
    };
    let Lit::Int(integer) = &literal.lit else {
        return Err(not_an_integer(name, value));
    };
    if !integer.suffix().is_empty() && integer.suffix() != suffix {
        return Err(syn::Error::new(
            integer.span(),
            format!(
                "`{name}` takes a plain integer; remove the suffix `{}`",
                integer.suffix()
            ),
        ));
    }
    // Too large for u64 is reported like any other value above the maximum.
    let parsed = integer.base10_parse::<u64>().unwrap_or(u64::MAX);
    match check(parsed) {
        Ok(value) => Ok(Number {
            value,
            span: integer.span(),
        }),
        Err(message) => Err(syn::Error::new(integer.span(), message)),
    }
}

fn not_an_integer(name: &Ident, value: &Expr) -> syn::Error {
    let example = ARGUMENTS
        .iter()
        .find(|spec| name == spec.name)
        .map_or("", |spec| spec.example);
    syn::Error::new_spanned(
        value,
        format!("`{name}` must be an integer literal, e.g. `{example}`"),
    )
}

fn action(value: &Expr) -> syn::Result<Action> {
    let action = match ungrouped(value) {
        Expr::Path(path) if path.path.is_ident("GiveUp") => Some(Action::GiveUp),
        Expr::Path(path) if path.path.is_ident("Continue") => Some(Action::Continue),
        _ => None,
    };
    action.ok_or_else(|| {
        let written = value.to_token_stream().to_string();
        syn::Error::new_spanned(
            value,
            format!("unknown action `{written}`; expected `GiveUp` or `Continue`"),
        )
    })
}

/// `crate = "path"` or `crate = path`: where the runtime is, when it is not `::fencelock`.
fn crate_path(value: &Expr) -> syn::Result<Path> {
    let path = match ungrouped(value) {
        Expr::Lit(literal) => match &literal.lit {
            Lit::Str(path) => path.parse_with(Path::parse_mod_style).ok(),
            _ => None,
        },
        Expr::Path(path)
            if path.qself.is_none()
                && path
                    .path
                    .segments
                    .iter()
                    .all(|segment| segment.arguments.is_none()) =>
        {
            Some(path.path.clone())
        }
        _ => None,
    };
    path.ok_or_else(|| {
        syn::Error::new_spanned(
            value,
            "`crate` must be the path of the fencelock crate, e.g. `crate = \"my_locks\"` or `crate = my_locks`",
        )
    })
}
