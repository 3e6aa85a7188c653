//! Checks that need the function or several arguments at once, and turns the
//! arguments into the `LockSpec` that `expand.rs` generates code from.

use std::ops::Range;

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::{
    FnArg, GenericArgument, Ident, LitBool, LitStr, Pat, Path, PathArguments, ReturnType,
    Signature, Type, TypeParamBound, parse_quote,
};

use fencelock_options::{Setting, Settings, Value};

use crate::args::{Action, Arg, LockArgs, Mode, Number, OnLost};
use crate::errors::Errors;
use crate::item::LockedFn;
use crate::suggest;
use crate::template::{self, Field, Segment};

/// A `#[redis_lock]` use that passed every check.
pub(crate) struct LockSpec {
    /// Where the runtime is: `::fencelock` unless `crate = ...` says otherwise.
    pub crate_path: Path,
    /// `client = EXPR`, if given.
    pub client: Option<syn::Expr>,
    /// One key (`key = ...`), or several mutexes locked together (`keys = [...]`).
    pub keys: Vec<Key>,
    pub kind: Kind,
    pub options: Options,
    /// The declared return type, a `Result` as far as syntax can tell.
    pub return_type: Type,
}

/// The kind of lock taken (the runtime's `LockKind`), from `mode`, `permits` or `shards`.
pub(crate) enum Kind {
    Mutex,
    Read,
    Write,
    Semaphore { permits: Number<u32> },
    Segmented { shards: Number<u32> },
}

/// The lock key: the template resolved against the function's arguments.
pub(crate) struct Key {
    /// The template as written, for the function's docs.
    pub template: String,
    /// The span of the `key = "..."` literal.
    pub span: Span,
    pub parts: Vec<KeyPart>,
}

/// One piece of the lock key.
pub(crate) enum KeyPart {
    /// Literal text, used verbatim.
    Text(String),
    /// An argument, or a field of one, formatted with `Display` and escaped by the runtime.
    Value {
        /// The argument, with its own name resolution, located at the template.
        root: Ident,
        fields: Vec<Field>,
    },
}

/// The lock options the user wrote; the runtime holds the defaults of the others.
pub(crate) struct Options {
    /// `options = EXPR`: the `LockOptions` the others are applied to.
    pub base: Option<syn::Expr>,
    pub ttl_ms: Option<Number<u64>>,
    pub retry: Option<Number<u32>>,
    pub sleep_ms: Option<Number<u64>>,
    /// `action = GiveUp` or `action = Continue`, as written.
    pub action: Option<Action>,
    /// `renew = true` or `renew = false`, as written.
    pub renew: Option<LitBool>,
    pub on_lost: Option<OnLost>,
    pub min_hold_ms: Option<Number<u64>>,
    pub max_hold_ms: Option<Number<u64>>,
    pub wait_ms: Option<Number<u64>>,
    /// `fair = true` or `fair = false`, as written.
    pub fair: Option<LitBool>,
    pub min_replicas: Option<Number<u32>>,
}

const NOT_A_RESULT: &str = "`#[redis_lock]` functions must return `Result<T, E>` with `E: From<fencelock::LockError>`: the lock can fail (not acquired, backend unreachable) and that failure is returned as `Err`";

/// Checks the arguments against the function. Returns `None` only when an
/// error was recorded in `errors`, here or while reading the arguments.
pub(crate) fn validate(args: LockArgs, func: &LockedFn, errors: &mut Errors) -> Option<LockSpec> {
    let return_type = check_signature(&func.sig, errors);
    // Without a usable `key` or `keys`, args.rs has already said why.
    let keys = check_keys(&args, &func.sig, errors);
    let give_up = args
        .action
        .as_ref()
        .is_some_and(|action| action.value == Action::GiveUp);
    check_give_up(&args, give_up, errors);
    check_share(&args, errors);
    check_settings(&args, errors);
    check_kind(&args, errors);
    // With more than one, `check_kind` has recorded an error and this is not used.
    let kind = match (args.mode, args.permits, args.shards) {
        (Some(mode), ..) => match mode.value {
            Mode::Read => Kind::Read,
            Mode::Write => Kind::Write,
        },
        (None, Some(permits), _) => Kind::Semaphore {
            permits: permits.value,
        },
        (None, None, Some(shards)) => Kind::Segmented {
            shards: shards.value,
        },
        (None, None, None) => Kind::Mutex,
    };
    Some(LockSpec {
        crate_path: args
            .crate_path
            .map_or_else(|| parse_quote!(::fencelock), |path| path.value),
        client: args.client.map(|client| client.value),
        keys: keys?,
        kind,
        options: Options {
            base: args.options.map(|options| options.value),
            ttl_ms: args.ttl_ms.map(|ttl_ms| ttl_ms.value),
            retry: args.retry.map(|retry| retry.value),
            sleep_ms: args.sleep_ms.map(|sleep_ms| sleep_ms.value),
            action: args.action.map(|action| action.value),
            renew: args.renew.map(|renew| renew.value),
            on_lost: args.on_lost.map(|on_lost| on_lost.value),
            min_hold_ms: args.min_hold_ms.map(|min_hold_ms| min_hold_ms.value),
            max_hold_ms: args.max_hold_ms.map(|max_hold_ms| max_hold_ms.value),
            wait_ms: args.wait_ms.map(|wait_ms| wait_ms.value),
            fair: args.fair.map(|fair| fair.value),
            min_replicas: args.min_replicas.map(|min_replicas| min_replicas.value),
        },
        return_type: return_type?,
    })
}

/// Checks the arguments that `action = GiveUp` makes pointless.
fn check_give_up(args: &LockArgs, give_up: bool, errors: &mut Errors) {
    if !give_up {
        return;
    }
    // Not only useless: the runtime's `wait_ms()` switches back to
    // `Continue`, and the expansion calls it after `action(GiveUp)`.
    const ONE_ATTEMPT: &str = " (one attempt, then fail)";
    if let Some(retry) = &args.retry {
        errors.push(no_effect_with_give_up(&retry.name, "retry", ONE_ATTEMPT));
    }
    if let Some(wait_ms) = &args.wait_ms {
        errors.push(no_effect_with_give_up(
            &wait_ms.name,
            "wait_ms",
            ONE_ATTEMPT,
        ));
    }
    // `fair = false` is the default, and harmless.
    if let Some(fair) = args.fair.as_ref().filter(|fair| fair.value.value) {
        errors.push(no_effect_with_give_up(
            &fair.name,
            "fair = true",
            ": a request that never waits never queues",
        ));
    }
}

/// The error for an argument that `action = GiveUp` makes pointless, at the
/// argument's name; `written` is how the message quotes it, `why` follows
/// `action = GiveUp`.
fn no_effect_with_give_up(name: &Ident, written: &str, why: &str) -> syn::Error {
    let name_text = name.unraw();
    syn::Error::new(
        name.span(),
        format!(
            "`{written}` has no effect with `action = GiveUp`{why}; remove `{name_text}` or use `action = Continue`"
        ),
    )
}

/// Checks what `action = Share` needs: one key, a mutex (single-flight computes under one
/// key's mutex). Each conflicting argument is an error at its name.
fn check_share(args: &LockArgs, errors: &mut Errors) {
    if !args
        .action
        .as_ref()
        .is_some_and(|action| action.value == Action::Share)
    {
        return;
    }
    if let Some(keys) = &args.keys {
        errors.push(syn::Error::new(
            keys.name.span(),
            "`action = Share` shares the value computed under one key; remove `keys` and lock \
             one key with `key = \"...\"`",
        ));
    }
    for (written, name) in kind_arguments(args) {
        errors.push(syn::Error::new(
            name.span(),
            format!(
                "`action = Share` computes under the key's mutex, and `{written}` asks for \
                 another kind; remove `{written}`"
            ),
        ));
    }
}

/// The arguments that choose a kind of lock other than the mutex, as written.
fn kind_arguments(args: &LockArgs) -> impl Iterator<Item = (&'static str, &Ident)> {
    [
        ("mode", args.mode.as_ref().map(|arg| &arg.name)),
        ("permits", args.permits.as_ref().map(|arg| &arg.name)),
        ("shards", args.shards.as_ref().map(|arg| &arg.name)),
    ]
    .into_iter()
    .filter_map(|(written, name)| Some((written, name?)))
}

/// Checks that one argument at most chooses the kind of lock: each written after the first
/// is an error at its name, as a duplicate is. A lock has one kind, and no two combine into
/// another (a read lock already admits any number of readers). With `keys`, every kind
/// argument is an error already (see `check_several`).
fn check_kind(args: &LockArgs, errors: &mut Errors) {
    if args.keys.is_some() {
        return;
    }
    let mode = args.mode.as_ref().map(|mode| {
        let kind = match mode.value {
            Mode::Read => "a read lock",
            Mode::Write => "a write lock",
        };
        ("mode", &mode.name, kind)
    });
    let permits = args.permits.as_ref();
    let permits = permits.map(|permits| ("permits", &permits.name, "a semaphore"));
    let shards = args.shards.as_ref();
    let shards = shards.map(|shards| ("shards", &shards.name, "a segmented lock"));
    let mut kinds: Vec<_> = [mode, permits, shards].into_iter().flatten().collect();
    kinds.sort_by_key(|&(written, ..)| args.written.iter().position(|name| *name == written));
    let Some(((first, _, first_kind), later)) = kinds.split_first() else {
        return;
    };
    for (written, name, kind) in later {
        errors.push(syn::Error::new(
            name.span(),
            format!(
                "`{first}` asks for {first_kind} and `{written}` for {kind}: a lock has one kind; remove `{first}` or `{written}`"
            ),
        ));
    }
}

/// Applies the runtime's rules between settings (`fencelock-options`) to the values
/// written as literals, so that a configuration every call would reject fails to compile.
/// What is not known here (an expression, or what `options = EXPR` sets) is left to the
/// runtime, which applies the same rules.
fn check_settings(args: &LockArgs, errors: &mut Errors) {
    let with_base = args.options.is_some();
    // A value rejected on its own has its own error, and comparing it too would add a
    // misleading second one: it counts as unknown, as does anything else not a literal.
    let value = |arg: &Option<Arg<Number<u64>>>, name: &str| match arg {
        Some(arg) => arg.value.known().map_or(Value::Unknown, Value::Given),
        None if with_base || args.was_written(name) => Value::Unknown,
        None => Value::Default,
    };
    let settings = Settings {
        ttl_ms: value(&args.ttl_ms, "ttl_ms"),
        sleep_ms: value(&args.sleep_ms, "sleep_ms"),
        wait_ms: value(&args.wait_ms, "wait_ms"),
        renew: match &args.renew {
            Some(renew) => Value::Given(renew.value.value),
            None if with_base || args.was_written("renew") => Value::Unknown,
            None => Value::Default,
        },
        min_hold_ms: value(&args.min_hold_ms, "min_hold_ms"),
        max_hold_ms: value(&args.max_hold_ms, "max_hold_ms"),
        // With `GiveUp`, a written `wait_ms` has its own error (see `check_give_up`).
        give_up: match &args.action {
            Some(action) => Value::Given(action.value == Action::GiveUp),
            None if with_base || args.was_written("action") => Value::Unknown,
            None => Value::Default,
        },
    };
    for problem in settings.problems() {
        let arg = match problem.setting {
            Setting::TtlMs => &args.ttl_ms,
            Setting::SleepMs => &args.sleep_ms,
            Setting::WaitMs => &args.wait_ms,
            Setting::MinHoldMs => &args.min_hold_ms,
            Setting::MaxHoldMs => &args.max_hold_ms,
        };
        let span = arg
            .as_ref()
            .map_or_else(Span::call_site, |arg| arg.name.span());
        errors.push(syn::Error::new(span, problem.message));
    }
}

/// Checks the function's qualifiers and return type; returns the return type.
fn check_signature(sig: &Signature, errors: &mut Errors) -> Option<Type> {
    if let Some(const_token) = sig.constness {
        errors.push(syn::Error::new(
            const_token.span,
            "`#[redis_lock]` cannot be used on a `const fn`; remove `const` and make the function `async`",
        ));
    } else if sig.asyncness.is_none() {
        let message = if returns_boxed_future(sig) {
            "`#[redis_lock]` sees the output of `#[async_trait]`, which expands first; use a native `async fn` in the trait (Rust 1.75+), or put `#[redis_lock]` on an inherent `async fn` that the trait method calls"
        } else {
            "`#[redis_lock]` can only be used on an `async fn`"
        };
        errors.push(syn::Error::new(sig.fn_token.span, message));
    }
    if let Some(abi) = &sig.abi {
        errors.push(syn::Error::new_spanned(
            abi,
            "`#[redis_lock]` cannot be used on an `extern` function; remove the `extern` ABI",
        ));
    }
    if let Some(variadic) = &sig.variadic {
        errors.push(syn::Error::new_spanned(
            variadic,
            "`#[redis_lock]` cannot be used on a C-variadic function; remove the `...` argument",
        ));
    }
    // The return type of a non-async fn means something else (it may well be
    // `impl Future<Output = Result<..>>`), so it is judged only on an async fn.
    if sig.asyncness.is_some() {
        errors.collect(result_type(sig))
    } else {
        None
    }
}

/// The declared return type, if it can be a `Result`. Paths of any name are
/// accepted (`Result`, `AppResult<T>`, `anyhow::Result<T>`): the runtime's
/// trait bound decides, with its own diagnostic.
fn result_type(sig: &Signature) -> syn::Result<Type> {
    match &sig.output {
        ReturnType::Type(_, ty) if can_be_result(ty) => Ok((**ty).clone()),
        ReturnType::Type(_, ty) => Err(syn::Error::new_spanned(ty, NOT_A_RESULT)),
        ReturnType::Default => Err(syn::Error::new_spanned(sig, NOT_A_RESULT)),
    }
}

fn can_be_result(ty: &Type) -> bool {
    match ty {
        Type::Path(_) | Type::Macro(_) | Type::Verbatim(_) => true,
        Type::Group(group) => can_be_result(&group.elem),
        Type::Paren(paren) => can_be_result(&paren.elem),
        _ => false,
    }
}

/// Whether the function returns `Pin<Box<dyn Future<..> ..>>`, as the
/// methods rewritten by `#[async_trait]` do.
fn returns_boxed_future(sig: &Signature) -> bool {
    let ReturnType::Type(_, ty) = &sig.output else {
        return false;
    };
    let boxed = type_argument(ty, "Pin").and_then(|pinned| type_argument(pinned, "Box"));
    let Some(Type::TraitObject(object)) = boxed else {
        return false;
    };
    object.bounds.iter().any(|bound| {
        matches!(bound, TypeParamBound::Trait(bound)
            if bound.path.segments.last().is_some_and(|segment| segment.ident == "Future"))
    })
}

/// The first type argument of `ty` if `ty` is a path ending in `name<..>`.
fn type_argument<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    let Type::Path(path) = ty else {
        return None;
    };
    let segment = path
        .path
        .segments
        .last()
        .filter(|segment| segment.ident == name)?;
    let PathArguments::AngleBracketed(arguments) = &segment.arguments else {
        return None;
    };
    arguments.args.iter().find_map(|argument| match argument {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    })
}

/// The key templates of `key` or `keys`, each checked; `keys` lists two or more distinct
/// templates, of mutexes.
fn check_keys(args: &LockArgs, sig: &Signature, errors: &mut Errors) -> Option<Vec<Key>> {
    let templates = match (&args.key, &args.keys) {
        (Some(key), None) => std::slice::from_ref(&key.value),
        (None, Some(keys)) => &keys.value[..],
        (Some(_), Some(keys)) => {
            errors.push(syn::Error::new(
                keys.name.span(),
                "`key` and `keys` together: write one key as `key = \"...\"`, or every key in \
                 `keys = [...]`",
            ));
            return None;
        }
        (None, None) => return None,
    };
    if let Some(keys) = &args.keys {
        check_several(keys, args, errors);
    }
    let keys: Vec<_> = templates
        .iter()
        .map(|template| check_key(template, sig, errors))
        .collect();
    keys.into_iter().collect()
}

/// Checks what `keys = [...]` needs beyond each template: two or more, none twice, and no
/// other kind than a mutex.
fn check_several(keys: &Arg<Vec<LitStr>>, args: &LockArgs, errors: &mut Errors) {
    match &keys.value[..] {
        [] => errors.push(syn::Error::new(
            keys.name.span(),
            "`keys` lists no key; list the keys to lock together, e.g. \
             `keys = [\"acct:{from}\", \"acct:{to}\"]`",
        )),
        [one] => errors.push(syn::Error::new(
            one.span(),
            format!("`keys` lists one key; write it as `key = {}`", one.token()),
        )),
        templates => {
            for (at, template) in templates.iter().enumerate() {
                if templates[..at]
                    .iter()
                    .any(|earlier| earlier.value() == template.value())
                {
                    errors.push(syn::Error::new(
                        template.span(),
                        "this template is listed twice in `keys`; remove one",
                    ));
                }
            }
        }
    }
    for (written, name) in kind_arguments(args) {
        errors.push(syn::Error::new(
            name.span(),
            format!(
                "`keys` locks each key as a mutex, and `{written}` asks for another kind; \
                 remove `{written}`, or lock one key with `key = \"...\"`"
            ),
        ));
    }
}

/// Parses the key template and resolves its placeholders against the
/// function's arguments.
fn check_key(template: &LitStr, sig: &Signature, errors: &mut Errors) -> Option<Key> {
    let segments = match template::parse(&template.value()) {
        Ok(segments) => segments,
        Err(template_errors) => {
            for error in template_errors {
                errors.push(syn::Error::new(
                    template_span(template, error.range),
                    error.message,
                ));
            }
            return None;
        }
    };
    let texts = || {
        segments.iter().filter_map(|segment| match segment {
            Segment::Text(text) => Some(text.as_str()),
            Segment::Placeholder(_) => None,
        })
    };
    let text_len = texts().map(str::len).sum();
    let chars = texts().flat_map(str::chars);
    if let Some(problem) = fencelock_options::key_text_problem(text_len, chars) {
        errors.push(syn::Error::new(template.span(), problem));
        return None;
    }
    let arguments = NamedArguments::of(sig);
    let mut parts = Vec::with_capacity(segments.len());
    let mut valid = true;
    for segment in segments {
        match segment {
            Segment::Text(text) => parts.push(KeyPart::Text(text)),
            Segment::Placeholder(placeholder) => match arguments.find(&placeholder.root) {
                Some(argument) => {
                    let mut root = argument.clone();
                    root.set_span(root.span().located_at(template.span()));
                    parts.push(KeyPart::Value {
                        root,
                        fields: placeholder.fields,
                    });
                }
                None => {
                    valid = false;
                    errors.push(syn::Error::new(
                        template_span(template, placeholder.range),
                        arguments.unknown(&placeholder.root),
                    ));
                }
            },
        }
    }
    valid.then(|| Key {
        template: template.value(),
        span: template.span(),
        parts,
    })
}

/// The arguments a placeholder can name.
struct NamedArguments {
    /// `self` for a receiver, then the arguments bound to a plain name.
    names: Vec<Ident>,
    /// Whether some argument is a pattern (`(a, b): (u32, u32)`), which has no name.
    has_patterns: bool,
}

impl NamedArguments {
    fn of(sig: &Signature) -> Self {
        let mut names = Vec::new();
        let mut has_patterns = false;
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(receiver) => {
                    names.push(Ident::new("self", receiver.self_token.span));
                }
                FnArg::Typed(typed) => match &*typed.pat {
                    Pat::Ident(pat) => names.push(pat.ident.clone()),
                    Pat::Wild(_) => {}
                    _ => has_patterns = true,
                },
            }
        }
        NamedArguments {
            names,
            has_patterns,
        }
    }

    fn find(&self, name: &str) -> Option<&Ident> {
        self.names.iter().find(|ident| ident.unraw() == name)
    }

    /// The message for a placeholder naming no argument.
    fn unknown(&self, name: &str) -> String {
        let mut message = if self.names.is_empty() {
            format!("no argument named `{name}` in this function; it has no named arguments")
        } else {
            let names: Vec<_> = self
                .names
                .iter()
                .map(|ident| ident.unraw().to_string())
                .collect();
            format!(
                "no argument named `{name}` in this function; its arguments are: {}",
                names.join(", ")
            )
        };
        let names = self.names.iter().map(|ident| ident.unraw().to_string());
        let names: Vec<String> = names.collect();
        if let Some(meant) = suggest::closest(name, names.iter().map(String::as_str)) {
            message.push_str(&format!("; did you mean `{{{meant}}}`?"));
        } else if names.first().is_some_and(|first| first == "self") {
            message.push_str(&format!(
                "; if `{name}` is a field of `self`, write `{{self.{name}}}`"
            ));
        }
        if self.has_patterns {
            message.push_str(
                " (a destructured argument has no name: bind it to a name and destructure it in the body)",
            );
        }
        message
    }
}

/// The span of `range` (bytes of the template's value) inside the literal.
///
/// Sub-spans exist only on nightly compilers, and byte offsets in the value
/// match the source only when nothing in it was escaped; otherwise, and for
/// an empty range, the whole literal is used.
fn template_span(template: &LitStr, range: Range<usize>) -> Span {
    if range.is_empty() {
        return template.span();
    }
    let token = template.token();
    let source = token.to_string();
    let value = template.value();
    let Some(quote) = source.find('"') else {
        return template.span();
    };
    // `"` or `r#"`: the closing delimiter mirrors the hashes of the opening one.
    let hashes = source[..quote].trim_start_matches('r');
    let opening = &source[..=quote];
    if source != format!("{opening}{value}\"{hashes}") {
        return template.span();
    }
    let start = opening.len();
    token
        .subspan(start + range.start..start + range.end)
        .unwrap_or_else(|| template.span())
}
