//! The arguments inside `#[redis_lock(...)]`.
//!
//! Each argument is read on its own here: its syntax, its type and its range.
//! Checks that need the function (placeholders) or several arguments
//! (`retry`, `wait_ms` and `fair` with `GiveUp`, `wait_ms` against `sleep_ms`,
//! the hold bounds against `ttl_ms`, one lock kind) live in `validate.rs`.

use fencelock_options::{Count, Setting, check_count, check_value};
use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::meta::ParseNestedMeta;
use syn::parse::{ParseStream, Parser};
use syn::{Expr, ExprLit, ExprUnary, Ident, Lit, LitBool, LitStr, Path, Token, UnOp};

use crate::errors::Errors;
use crate::suggest;

/// The arguments as written; `None` for those left out.
#[derive(Default)]
pub(crate) struct LockArgs {
    pub key: Option<Arg<LitStr>>,
    pub keys: Option<Arg<Vec<LitStr>>>,
    pub ttl_ms: Option<Arg<Number<u64>>>,
    pub retry: Option<Arg<Number<u32>>>,
    pub sleep_ms: Option<Arg<Number<u64>>>,
    pub action: Option<Arg<Action>>,
    pub renew: Option<Arg<LitBool>>,
    pub on_lost: Option<Arg<OnLost>>,
    pub min_hold_ms: Option<Arg<Number<u64>>>,
    pub max_hold_ms: Option<Arg<Number<u64>>>,
    pub wait_ms: Option<Arg<Number<u64>>>,
    pub fair: Option<Arg<LitBool>>,
    pub min_replicas: Option<Arg<Number<u32>>>,
    pub mode: Option<Arg<Mode>>,
    pub permits: Option<Arg<Number<u32>>>,
    pub shards: Option<Arg<Number<u32>>>,
    pub client: Option<Arg<Expr>>,
    pub options: Option<Arg<Expr>>,
    pub crate_path: Option<Arg<Path>>,
    /// The names of the arguments written, with a usable value or not.
    pub written: Vec<&'static str>,
}

impl LockArgs {
    /// Whether `name` was written, even if its value was rejected.
    pub(crate) fn was_written(&self, name: &str) -> bool {
        self.written.contains(&name)
    }
}

/// One argument: its name as written (for spans) and its value.
pub(crate) struct Arg<T> {
    pub name: Ident,
    pub value: T,
}

/// An integer argument: a literal, checked here, or an expression such as a `const`,
/// which the runtime checks by the same rules.
pub(crate) enum Number<T> {
    Literal { value: T, span: Span },
    Expr(Box<Expr>),
}

impl<T: Copy> Number<T> {
    /// The value, if written as a literal.
    pub(crate) fn known(&self) -> Option<T> {
        match self {
            Number::Literal { value, .. } => Some(*value),
            Number::Expr(_) => None,
        }
    }
}

/// What to do when the lock is held by someone else.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// One attempt, then fail.
    GiveUp,
    /// Keep trying, for up to `wait_ms` in all or `retry` pauses of up to
    /// `sleep_ms` that no release notification ended.
    Continue,
    /// As `Continue`, and the callers of the key that overlap a computation get its value
    /// instead of computing it again (single-flight).
    Share,
}

/// What the body does when the lease is lost while it runs (the runtime's `OnLost`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnLost {
    /// Drop the body at its next `.await` and return `Err(LockError::Lost)`.
    Abort,
    /// Let the body finish.
    Continue,
}

/// Which side of a read-write lock (the runtime's `LockKind::Read` and `LockKind::Write`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Shared with other readers, never with a writer.
    Read,
    /// Alone: no other writer, no reader.
    Write,
}

/// One accepted argument: how it is written and where its value goes.
struct ArgumentSpec {
    name: &'static str,
    /// Shown when the argument is written without a value.
    example: &'static str,
    /// Reads the value and stores it in its field of `LockArgs`.
    store: fn(&mut LockArgs, Ident, Expr) -> syn::Result<()>,
}

/// Every argument, in the order they are listed in messages. A new argument
/// is one row here plus one field in `LockArgs`.
const ARGUMENTS: &[ArgumentSpec] = &[
    ArgumentSpec {
        name: "key",
        example: "key = \"order:{id}\"",
        store: |args, name, value| store(&mut args.key, name, key_template(&value)),
    },
    ArgumentSpec {
        name: "keys",
        example: "keys = [\"acct:{from}\", \"acct:{to}\"]",
        store: |args, name, value| store(&mut args.keys, name, key_templates(&value)),
    },
    ArgumentSpec {
        name: "ttl_ms",
        example: "ttl_ms = 10_000",
        store: |args, name, value| {
            let number = milliseconds(&name, &value, Setting::TtlMs);
            store(&mut args.ttl_ms, name, number)
        },
    },
    ArgumentSpec {
        name: "retry",
        example: "retry = 5",
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
        store: |args, name, value| {
            let number = milliseconds(&name, &value, Setting::SleepMs);
            store(&mut args.sleep_ms, name, number)
        },
    },
    ArgumentSpec {
        name: "action",
        example: "action = GiveUp",
        store: |args, name, value| {
            let action = keyword(
                &name,
                &value,
                &[
                    ("GiveUp", Action::GiveUp),
                    ("Continue", Action::Continue),
                    ("Share", Action::Share),
                ],
            );
            store(&mut args.action, name, action)
        },
    },
    ArgumentSpec {
        name: "renew",
        example: "renew = false",
        store: |args, name, value| {
            let renew = boolean(&name, &value);
            store(&mut args.renew, name, renew)
        },
    },
    ArgumentSpec {
        name: "on_lost",
        example: "on_lost = Continue",
        store: |args, name, value| {
            let on_lost = keyword(
                &name,
                &value,
                &[("Abort", OnLost::Abort), ("Continue", OnLost::Continue)],
            );
            store(&mut args.on_lost, name, on_lost)
        },
    },
    ArgumentSpec {
        name: "min_hold_ms",
        example: "min_hold_ms = 60_000",
        store: |args, name, value| {
            let number = milliseconds(&name, &value, Setting::MinHoldMs);
            store(&mut args.min_hold_ms, name, number)
        },
    },
    ArgumentSpec {
        name: "max_hold_ms",
        example: "max_hold_ms = 600_000",
        store: |args, name, value| {
            let number = milliseconds(&name, &value, Setting::MaxHoldMs);
            store(&mut args.max_hold_ms, name, number)
        },
    },
    ArgumentSpec {
        name: "wait_ms",
        example: "wait_ms = 5_000",
        store: |args, name, value| {
            let number = milliseconds(&name, &value, Setting::WaitMs);
            store(&mut args.wait_ms, name, number)
        },
    },
    ArgumentSpec {
        name: "fair",
        example: "fair = true",
        store: |args, name, value| {
            let fair = boolean(&name, &value);
            store(&mut args.fair, name, fair)
        },
    },
    ArgumentSpec {
        name: "min_replicas",
        example: "min_replicas = 1",
        store: |args, name, value| {
            let number = number(&name, &value, "u32", |value: u64| {
                u32::try_from(value).map_err(|_| {
                    format!(
                        "`min_replicas` must be at most {}; use the number of replicas that \
                         must have the grant",
                        u32::MAX
                    )
                })
            });
            store(&mut args.min_replicas, name, number)
        },
    },
    ArgumentSpec {
        name: "mode",
        example: "mode = Read",
        store: |args, name, value| {
            let mode = keyword(
                &name,
                &value,
                &[("Read", Mode::Read), ("Write", Mode::Write)],
            );
            store(&mut args.mode, name, mode)
        },
    },
    ArgumentSpec {
        name: "permits",
        example: "permits = 5",
        store: |args, name, value| {
            let number = count(&name, &value, Count::Permits);
            store(&mut args.permits, name, number)
        },
    },
    ArgumentSpec {
        name: "shards",
        example: "shards = 16",
        store: |args, name, value| {
            let number = count(&name, &value, Count::Shards);
            store(&mut args.shards, name, number)
        },
    },
    ArgumentSpec {
        name: "client",
        example: "client = self.locks",
        store: |args, name, value| store(&mut args.client, name, Ok(value)),
    },
    ArgumentSpec {
        name: "options",
        example: "options = LOCK_OPTIONS",
        store: |args, name, value| store(&mut args.options, name, Ok(value)),
    },
    ArgumentSpec {
        name: "crate",
        example: "crate = \"fencelock\"",
        store: |args, name, value| store(&mut args.crate_path, name, crate_path(&value)),
    },
];

/// Reads the attribute's arguments, recording every problem in `errors`.
pub(crate) fn parse(attr: TokenStream, errors: &mut Errors) -> LockArgs {
    let mut args = LockArgs::default();
    let parser = |input: ParseStream| {
        unnamed_key(&mut args, input, errors)?;
        let named = syn::meta::parser(|meta| parse_argument(&mut args, &meta, errors));
        named.parse2(input.parse()?)
    };
    match parser.parse2(attr) {
        // A syntax error stopped the parser; the problems with names and
        // values were recorded by `parse_argument` as it went.
        Err(error) => errors.push(error),
        // Only now is it known that the key was left out, rather than written with a bad
        // value or lost after a syntax error.
        Ok(()) => {
            if !args.was_written("key") && !args.was_written("keys") {
                errors.push(syn::Error::new(
                    Span::call_site(),
                    "missing `key = \"...\"`: the lock key template, e.g. `key = \"order:{id}\"` \
                     (or `keys = [...]` for several keys locked together)",
                ));
            }
        }
    }
    args
}

/// Takes a template written first without `key = `, as other attributes take their
/// main argument: an error that shows how to write it, and the template is used as the
/// key so that no "missing `key`" error follows.
fn unnamed_key(args: &mut LockArgs, input: ParseStream, errors: &mut Errors) -> syn::Result<()> {
    if !input.peek(LitStr) {
        return Ok(());
    }
    let template: LitStr = input.parse()?;
    errors.push(syn::Error::new(
        template.span(),
        format!(
            "the key template needs its name: write `key = {}`",
            template.token()
        ),
    ));
    args.written.push("key");
    args.key = Some(Arg {
        name: Ident::new("key", template.span()),
        value: template,
    });
    if !input.is_empty() {
        input.parse::<Token![,]>()?;
    }
    Ok(())
}

/// Reads one `name = value`. Problems with the name or the value are recorded
/// and parsing goes on with the next argument; only broken syntax stops it.
fn parse_argument(
    args: &mut LockArgs,
    meta: &ParseNestedMeta,
    errors: &mut Errors,
) -> syn::Result<()> {
    let name = path_text(&meta.path);
    let Some(spec) = ARGUMENTS.iter().find(|spec| spec.name == name) else {
        errors.push(syn::Error::new_spanned(&meta.path, unknown_argument(&name)));
        return skip_argument(meta.input);
    };
    args.written.push(spec.name);
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

/// Names that other lock libraries give the arguments, and the argument each means here.
const OTHER_NAMES: &[(&str, &str)] = &[
    ("ttl", "ttl_ms"),
    ("lease", "ttl_ms"),
    ("lease_ms", "ttl_ms"),
    ("lease_time", "ttl_ms"),
    ("leasetime", "ttl_ms"),
    ("expire", "ttl_ms"),
    ("expire_ms", "ttl_ms"),
    ("lock_at_most_for", "max_hold_ms"),
    ("lock_at_least_for", "min_hold_ms"),
    ("wait_time", "wait_ms"),
    ("waittime", "wait_ms"),
    ("timeout", "wait_ms"),
    ("timeout_ms", "wait_ms"),
    ("acquire_timeout", "wait_ms"),
    ("retries", "retry"),
    ("retry_times", "retry"),
    ("attempts", "retry"),
    ("retry_interval", "sleep_ms"),
    ("interval", "sleep_ms"),
    ("sleep", "sleep_ms"),
    ("name", "key"),
    ("replicas", "min_replicas"),
    ("min_slaves", "min_replicas"),
    ("wait_replicas", "min_replicas"),
    ("kind", "mode"),
    ("semaphore", "permits"),
    ("segments", "shards"),
];

/// The error for an argument name that is not one of `ARGUMENTS`: the one it likely
/// means, then all of them.
fn unknown_argument(name: &str) -> String {
    let names = ARGUMENTS.iter().map(|spec| spec.name);
    let lowercase = name.to_lowercase();
    let meant = OTHER_NAMES
        .iter()
        .find(|(other, _)| *other == lowercase)
        .map(|&(_, meant)| meant)
        .or_else(|| suggest::closest(name, names.clone()));
    let expected: Vec<_> = names.collect();
    let mut message = format!("unknown argument `{name}`; ");
    if let Some(meant) = meant {
        message.push_str(&format!("did you mean `{meant}`? "));
    }
    message.push_str(&format!("expected one of: {}", expected.join(", ")));
    message
}

/// A path as written (argument names, constants), without the spaces `to_string` puts
/// around `::`.
pub(crate) fn path_text(path: &Path) -> String {
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

/// `keys = ["...", ...]`: each element a template as `key` takes it.
fn key_templates(value: &Expr) -> syn::Result<Vec<LitStr>> {
    let Expr::Array(array) = ungrouped(value) else {
        return Err(syn::Error::new_spanned(
            value,
            "`keys` must be a list of string literal templates, e.g. \
             `keys = [\"acct:{from}\", \"acct:{to}\"]`",
        ));
    };
    array
        .elems
        .iter()
        .map(|element| match ungrouped(element) {
            Expr::Lit(ExprLit {
                lit: Lit::Str(template),
                ..
            }) => Ok(template.clone()),
            _ => Err(syn::Error::new_spanned(
                element,
                "each of `keys` must be a string literal template, e.g. `\"acct:{from}\"`",
            )),
        })
        .collect()
}

fn not_a_template(value: &Expr) -> syn::Error {
    syn::Error::new_spanned(
        value,
        "`key` must be a string literal template, e.g. `key = \"order:{id}\"`",
    )
}

/// A duration in milliseconds, checked by the rules of `fencelock-options`.
fn milliseconds(name: &Ident, value: &Expr, setting: Setting) -> syn::Result<Number<u64>> {
    number(name, value, "u64", |value: u64| {
        check_value(setting, value).map_err(|problem| problem.message)
    })
}

/// The count of a lock kind, checked by the rules of `fencelock-options`.
fn count(name: &Ident, value: &Expr, count: Count) -> syn::Result<Number<u32>> {
    number(name, value, "u32", |value: u64| check_count(count, value))
}

/// An integer: a literal checked by `check`, or any other expression, left to the
/// runtime. `suffix` is the argument's type, the one suffix allowed on a literal; any other (`10s`, `5i8`)
/// is rejected rather than ignored.
fn number<T>(
    name: &Ident,
    value: &Expr,
    suffix: &str,
    check: impl Fn(u64) -> Result<T, String>,
) -> syn::Result<Number<T>> {
    let integer = match ungrouped(value) {
        Expr::Lit(ExprLit {
            lit: Lit::Int(integer),
            ..
        }) => integer,
        Expr::Lit(_) => return Err(not_an_integer(name, value, suffix)),
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) if matches!(ungrouped(expr), Expr::Lit(_)) => {
            let message = check(0).err().unwrap_or_else(|| {
                format!(
                    "`{name}` cannot be negative; use 0 or more, e.g. `{}`",
                    example(name)
                )
            });
            return Err(syn::Error::new_spanned(value, message));
        }
        _ => return Ok(Number::Expr(Box::new(value.clone()))),
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
    let checked = match integer.base10_parse::<u64>() {
        Ok(parsed) => check(parsed),
        // Too large for u64 is reported like any other value above the
        // maximum; a check without a maximum below `u64::MAX` would accept
        // that stand-in, so the literal is then rejected here.
        Err(_) => Err(check(u64::MAX).err().unwrap_or_else(|| {
            format!(
                "`{name}` must be at most {} (`u64::MAX`); use a smaller value",
                u64::MAX
            )
        })),
    };
    match checked {
        Ok(value) => Ok(Number::Literal {
            value,
            span: integer.span(),
        }),
        Err(message) => Err(syn::Error::new(integer.span(), message)),
    }
}

/// How the argument `name` is written, for messages.
fn example(name: &Ident) -> &'static str {
    ARGUMENTS
        .iter()
        .find(|spec| name == spec.name)
        .map_or("", |spec| spec.example)
}

/// The error for a value that is no integer; `ty` is the argument's type.
fn not_an_integer(name: &Ident, value: &Expr, ty: &str) -> syn::Error {
    syn::Error::new_spanned(
        value,
        format!(
            "`{name}` must be an integer: a literal such as `{}`, or a constant or expression of type `{ty}`",
            example(name)
        ),
    )
}

/// A bare word naming one of `variants`, as in `action = GiveUp`. Another word, or a
/// string, close to one of them (`Raed`, `read`, `"Read"`) gets that one suggested.
fn keyword<T: Copy>(name: &Ident, value: &Expr, variants: &[(&str, T)]) -> syn::Result<T> {
    let words = variants.iter().map(|&(word, _)| word);
    let meant = match ungrouped(value) {
        Expr::Path(path) => match path.path.get_ident() {
            Some(word) => {
                let word = word.unraw().to_string();
                if let Some(&(_, variant)) = variants.iter().find(|&&(known, _)| known == word) {
                    return Ok(variant);
                }
                suggest::closest(&word, words)
            }
            None => None,
        },
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => suggest::closest(&text.value(), words),
        _ => None,
    };
    let written = value.to_token_stream().to_string();
    let quoted: Vec<_> = variants
        .iter()
        .map(|(word, _)| format!("`{word}`"))
        .collect();
    let expected = match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => quoted.concat(),
    };
    let mut message = format!("unknown {name} `{written}`; ");
    if let Some(meant) = meant {
        message.push_str(&format!("did you mean `{meant}`? "));
    }
    message.push_str(&format!("expected {expected}"));
    Err(syn::Error::new_spanned(value, message))
}

/// `true` or `false`, kept as the literal so that the expansion points at it.
fn boolean(name: &Ident, value: &Expr) -> syn::Result<LitBool> {
    match ungrouped(value) {
        Expr::Lit(literal) => match &literal.lit {
            Lit::Bool(boolean) => Ok(boolean.clone()),
            _ => Err(not_a_boolean(name, value)),
        },
        _ => Err(not_a_boolean(name, value)),
    }
}

fn not_a_boolean(name: &Ident, value: &Expr) -> syn::Error {
    syn::Error::new_spanned(value, format!("`{name}` must be `true` or `false`"))
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
