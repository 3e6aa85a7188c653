//! Every error `#[redis_lock]` reports: its message, the code it points at,
//! and that the function is still emitted as written.

use std::str::FromStr;

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};

use crate::expand;

/// One reported error.
#[derive(Debug)]
struct Reported {
    message: String,
    /// The source text the error points at; empty for the attribute itself.
    at: String,
    /// Where that text starts in the source.
    offset: usize,
}

/// Expands `source`, a `#[redis_lock(...)]` attribute followed by an item, and
/// returns the errors. Asserts that the item is emitted unchanged before them.
fn errors(source: &str) -> Vec<Reported> {
    let (attr, item) = split_attribute(source);
    let output: Vec<TokenTree> = expand::redis_lock(attr, item.clone()).into_iter().collect();
    let item: Vec<TokenTree> = item.into_iter().collect();
    assert!(output.len() > item.len(), "no error reported for {source}");
    let (emitted, errors) = output.split_at(item.len());
    assert_eq!(
        TokenStream::from_iter(emitted.iter().cloned()).to_string(),
        TokenStream::from_iter(item).to_string(),
        "the item must be emitted unchanged"
    );
    // `::core::compile_error! { "message" }`: the first token carries the
    // start of the span, the braces its end.
    errors
        .chunks(8)
        .map(|tokens| {
            let [first, .., TokenTree::Group(group)] = tokens else {
                panic!("not a compile_error!: {tokens:?}");
            };
            assert_eq!(tokens[5].to_string(), "compile_error");
            assert_eq!(group.delimiter(), Delimiter::Brace);
            let literal: syn::LitStr = syn::parse2(group.stream()).expect("a string literal");
            let range = first.span().byte_range().start..group.span().byte_range().end;
            Reported {
                message: literal.value(),
                at: source[range.clone()].to_owned(),
                offset: range.start,
            }
        })
        .collect()
}

/// The single error of `source`, as (message, text it points at).
fn error(source: &str) -> (String, String) {
    let mut errors = errors(source);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let error = errors.remove(0);
    (error.message, error.at)
}

/// Splits `#[redis_lock(args)] item` into the macro's two inputs.
fn split_attribute(source: &str) -> (TokenStream, TokenStream) {
    let mut tokens = TokenStream::from_str(source)
        .expect("valid tokens")
        .into_iter();
    let (Some(TokenTree::Punct(_)), Some(TokenTree::Group(attribute))) =
        (tokens.next(), tokens.next())
    else {
        panic!("{source} must start with #[redis_lock]");
    };
    let mut attribute = attribute.stream().into_iter();
    assert_eq!(
        attribute.next().map(|name| name.to_string()).as_deref(),
        Some("redis_lock")
    );
    let args = match attribute.next() {
        Some(TokenTree::Group(args)) => args.stream(),
        _ => TokenStream::new(),
    };
    (args, tokens.collect())
}

/// A valid function to put attributes on.
fn on_valid_fn(args: &str) -> String {
    format!("#[redis_lock({args})] async fn f(id: u64) -> Result<(), E> {{}}")
}

#[test]
fn the_call_site_has_no_source_position() {
    // Errors without a better place are reported at the attribute, which
    // these tests see as an empty range at the start of the source.
    assert_eq!(Span::call_site().byte_range(), 0..0);
}

#[test]
fn unknown_argument() {
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", ttl = 5")),
        (
            "unknown argument `ttl`; did you mean `ttl_ms`? expected one of: key, keys, ttl_ms, retry, sleep_ms, action, renew, on_lost, min_hold_ms, max_hold_ms, wait_ms, fair, min_replicas, mode, permits, shards, client, options, crate".to_owned(),
            "ttl".to_owned()
        )
    );
}

#[test]
fn unknown_argument_without_value_or_with_a_list() {
    let errors = errors(&on_valid_fn("lease, key = \"a:{id}\", queue(4), a::b = 1"));
    let reported: Vec<_> = errors.iter().map(|error| error.at.as_str()).collect();
    assert_eq!(reported, ["lease", "queue", "a::b"]);
    assert!(
        errors[2]
            .message
            .starts_with("unknown argument `a::b`; expected one of:")
    );
}

#[test]
fn argument_without_value() {
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", ttl_ms")),
        (
            "`ttl_ms` needs a value, e.g. `ttl_ms = 10_000`".to_owned(),
            "ttl_ms".to_owned()
        )
    );
}

#[test]
fn key_without_value_is_not_also_missing() {
    assert_eq!(
        error(&on_valid_fn("key")),
        (
            "`key` needs a value, e.g. `key = \"order:{id}\"`".to_owned(),
            "key".to_owned()
        )
    );
}

#[test]
fn duplicate_argument() {
    let source = on_valid_fn("key = \"a:{id}\", retry = 1, retry = 2");
    let errors = errors(&source);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(
        errors[0].message,
        "duplicate argument `retry`; remove one of them"
    );
    assert_eq!(errors[0].offset, source.rfind("retry").unwrap());
}

#[test]
fn missing_key() {
    let message = "missing `key = \"...\"`: the lock key template, e.g. `key = \"order:{id}\"` \
                   (or `keys = [...]` for several keys locked together)";
    assert_eq!(
        error(&on_valid_fn("ttl_ms = 5")),
        (message.to_owned(), String::new())
    );
    assert_eq!(
        error("#[redis_lock] async fn f() -> Result<(), E> {}"),
        (message.to_owned(), String::new())
    );
}

#[test]
fn keys_beside_key() {
    assert_eq!(
        error(&on_valid_fn(
            "key = \"a:{id}\", keys = [\"a:{id}\", \"b:{id}\"]"
        )),
        (
            "`key` and `keys` together: write one key as `key = \"...\"`, or every key in \
             `keys = [...]`"
                .to_owned(),
            "keys".to_owned()
        )
    );
}

#[test]
fn keys_is_not_a_list_of_templates() {
    assert_eq!(
        error(&on_valid_fn("keys = \"a:{id}\"")),
        (
            "`keys` must be a list of string literal templates, e.g. \
             `keys = [\"acct:{from}\", \"acct:{to}\"]`"
                .to_owned(),
            "\"a:{id}\"".to_owned()
        )
    );
    assert_eq!(
        error(&on_valid_fn("keys = [\"a:{id}\", KEY]")),
        (
            "each of `keys` must be a string literal template, e.g. `\"acct:{from}\"`".to_owned(),
            "KEY".to_owned()
        )
    );
}

#[test]
fn keys_lists_fewer_than_two() {
    assert_eq!(
        error(&on_valid_fn("keys = []")),
        (
            "`keys` lists no key; list the keys to lock together, e.g. \
             `keys = [\"acct:{from}\", \"acct:{to}\"]`"
                .to_owned(),
            "keys".to_owned()
        )
    );
    assert_eq!(
        error(&on_valid_fn("keys = [\"a:{id}\"]")),
        (
            "`keys` lists one key; write it as `key = \"a:{id}\"`".to_owned(),
            "\"a:{id}\"".to_owned()
        )
    );
}

#[test]
fn keys_lists_a_template_twice() {
    let source = on_valid_fn("keys = [\"a:{id}\", \"b\", \"a:{id}\"]");
    let errors = errors(&source);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(
        errors[0].message,
        "this template is listed twice in `keys`; remove one"
    );
    assert_eq!(errors[0].offset, source.rfind("\"a:{id}\"").unwrap());
}

#[test]
fn keys_with_another_kind_than_a_mutex() {
    for kind in ["mode = Read", "permits = 3", "shards = 4"] {
        let written = &kind[..kind.find(' ').unwrap()];
        assert_eq!(
            error(&on_valid_fn(&format!(
                "keys = [\"a:{{id}}\", \"b\"], {kind}"
            ))),
            (
                format!(
                    "`keys` locks each key as a mutex, and `{written}` asks for another kind; \
                     remove `{written}`, or lock one key with `key = \"...\"`"
                ),
                written.to_owned()
            )
        );
    }
}

#[test]
fn share_with_several_keys_or_another_kind() {
    assert_eq!(
        error(&on_valid_fn("keys = [\"a:{id}\", \"b\"], action = Share")),
        (
            "`action = Share` shares the value computed under one key; remove `keys` and lock \
             one key with `key = \"...\"`"
                .to_owned(),
            "keys".to_owned()
        )
    );
    assert_eq!(
        error(&on_valid_fn(
            "key = \"a:{id}\", action = Share, permits = 2"
        )),
        (
            "`action = Share` computes under the key's mutex, and `permits` asks for another \
             kind; remove `permits`"
                .to_owned(),
            "permits".to_owned()
        )
    );
}

#[test]
fn keys_placeholder_names_no_argument() {
    let (message, at) = error(&on_valid_fn("keys = [\"a:{id}\", \"b:{nope}\"]"));
    assert!(message.starts_with("no argument named `nope`"), "{message}");
    assert_eq!(at, "{nope}");
}

#[test]
fn syntax_error_in_arguments_does_not_also_report_missing_key() {
    let (message, at) = error(&on_valid_fn("ttl_ms = 5 key = \"a:{id}\""));
    assert_eq!(message, "expected `,`");
    assert_eq!(at, "key");
}

#[test]
fn key_is_not_a_string() {
    assert_eq!(
        error(&on_valid_fn("key = order_key(id)")),
        (
            "`key` must be a string literal template, e.g. `key = \"order:{id}\"`".to_owned(),
            "order_key(id)".to_owned()
        )
    );
}

#[test]
fn zero_ttl() {
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", ttl_ms = 0")),
        (
            "`ttl_ms` must be greater than 0: a lease of 0 ms expires before it is granted"
                .to_owned(),
            "0".to_owned()
        )
    );
}

#[test]
fn ttl_above_a_day() {
    for value in ["86_400_001", "99999999999999999999999"] {
        assert_eq!(
            error(&on_valid_fn(&format!("key = \"a:{{id}}\", ttl_ms = {value}"))),
            (
                "`ttl_ms` must be at most 86_400_000 (24 h), the longest accepted; use a smaller value".to_owned(),
                value.to_owned()
            )
        );
    }
}

#[test]
fn zero_sleep() {
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", sleep_ms = 0")),
        (
            "`sleep_ms` must be greater than 0: a pause of 0 ms between attempts makes the retries a busy loop".to_owned(),
            "0".to_owned()
        )
    );
}

#[test]
fn sleep_above_a_day() {
    let (message, at) = error(&on_valid_fn("key = \"a:{id}\", sleep_ms = 100_000_000"));
    assert_eq!(
        message,
        "`sleep_ms` must be at most 86_400_000 (24 h), the longest accepted; use a smaller value"
    );
    assert_eq!(at, "100_000_000");
}

#[test]
fn zero_wait() {
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", wait_ms = 0")),
        (
            "`wait_ms` must be greater than 0: a wait of 0 ms is a single attempt; remove `wait_ms` and use `action = GiveUp` (`.give_up()`)".to_owned(),
            "0".to_owned()
        )
    );
}

#[test]
fn wait_above_a_day() {
    let (message, at) = error(&on_valid_fn("key = \"a:{id}\", wait_ms = 86_400_001"));
    assert_eq!(
        message,
        "`wait_ms` must be at most 86_400_000 (24 h), the longest accepted; use a smaller value"
    );
    assert_eq!(at, "86_400_001");
}

#[test]
fn retry_above_u32() {
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", retry = 4_294_967_296")),
        (
            "`retry` must be at most 4294967295; use a smaller number of attempts".to_owned(),
            "4_294_967_296".to_owned()
        )
    );
}

#[test]
fn not_an_integer() {
    for (args, message, at) in [
        (
            "ttl_ms = \"10\"",
            "`ttl_ms` must be an integer: a literal such as `ttl_ms = 10_000`, or a constant or expression of type `u64`",
            "\"10\"",
        ),
        (
            "retry = -1",
            "`retry` cannot be negative; use 0 or more, e.g. `retry = 5`",
            "-1",
        ),
        (
            "ttl_ms = -5",
            "`ttl_ms` must be greater than 0: a lease of 0 ms expires before it is granted",
            "-5",
        ),
        (
            "sleep_ms = 0.5",
            "`sleep_ms` must be an integer: a literal such as `sleep_ms = 200`, or a constant or expression of type `u64`",
            "0.5",
        ),
        (
            "retry = true",
            "`retry` must be an integer: a literal such as `retry = 5`, or a constant or expression of type `u32`",
            "true",
        ),
        (
            "min_replicas = -1",
            "`min_replicas` cannot be negative; use 0 or more, e.g. `min_replicas = 1`",
            "-1",
        ),
        (
            "min_replicas = 4_294_967_296",
            "`min_replicas` must be at most 4294967295; use the number of replicas that must have the grant",
            "4_294_967_296",
        ),
    ] {
        assert_eq!(
            error(&on_valid_fn(&format!("key = \"a:{{id}}\", {args}"))),
            (message.to_owned(), at.to_owned())
        );
    }
}

#[test]
fn integer_suffixes() {
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", ttl_ms = 10s")),
        (
            "`ttl_ms` takes a plain integer; remove the suffix `s`".to_owned(),
            "10s".to_owned()
        )
    );
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", retry = 5u64")).0,
        "`retry` takes a plain integer; remove the suffix `u64`"
    );
}

#[test]
fn unknown_action() {
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", action = Retry")),
        (
            "unknown action `Retry`; expected `GiveUp`, `Continue` or `Share`".to_owned(),
            "Retry".to_owned()
        )
    );
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", action = \"GiveUp\"")).0,
        "unknown action `\"GiveUp\"`; did you mean `GiveUp`? expected `GiveUp`, `Continue` or `Share`"
    );
}

#[test]
fn renew_is_not_a_bool() {
    for value in ["1", "\"false\"", "off", "!true"] {
        assert_eq!(
            error(&on_valid_fn(&format!(
                "key = \"a:{{id}}\", renew = {value}"
            ))),
            (
                "`renew` must be `true` or `false`".to_owned(),
                value.to_owned()
            )
        );
    }
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", renew")).0,
        "`renew` needs a value, e.g. `renew = false`"
    );
}

#[test]
fn fair_is_not_a_bool() {
    for value in ["1", "\"true\"", "yes", "Fair"] {
        assert_eq!(
            error(&on_valid_fn(&format!("key = \"a:{{id}}\", fair = {value}"))),
            (
                "`fair` must be `true` or `false`".to_owned(),
                value.to_owned()
            )
        );
    }
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", fair")).0,
        "`fair` needs a value, e.g. `fair = true`"
    );
}

#[test]
fn unknown_on_lost() {
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", on_lost = Panic")),
        (
            "unknown on_lost `Panic`; expected `Abort` or `Continue`".to_owned(),
            "Panic".to_owned()
        )
    );
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", on_lost = OnLost::Abort")).0,
        "unknown on_lost `OnLost :: Abort`; expected `Abort` or `Continue`"
    );
}

#[test]
fn zero_hold_bounds() {
    for (args, message) in [
        (
            "min_hold_ms = 0",
            "`min_hold_ms` must be greater than 0: a minimum hold of 0 ms is no minimum; remove `min_hold_ms`",
        ),
        (
            "max_hold_ms = 0",
            "`max_hold_ms` must be greater than 0: a lock held for at most 0 ms is lost as soon as it is acquired",
        ),
    ] {
        assert_eq!(
            error(&on_valid_fn(&format!("key = \"a:{{id}}\", {args}"))),
            (message.to_owned(), "0".to_owned())
        );
    }
}

#[test]
fn hold_bounds_out_of_range() {
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", min_hold_ms = 86_400_001")),
        (
            "`min_hold_ms` must be at most 86_400_000 (24 h), the longest accepted; use a smaller value".to_owned(),
            "86_400_001".to_owned()
        )
    );
    // `max_hold_ms` bounds the renewals, not one lease: only u64 limits it.
    assert_eq!(
        error(&on_valid_fn(
            "key = \"a:{id}\", max_hold_ms = 18_446_744_073_709_551_616"
        )),
        (
            "`max_hold_ms` must be at most 18446744073709551615 (`u64::MAX`); use a smaller value"
                .to_owned(),
            "18_446_744_073_709_551_616".to_owned()
        )
    );
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", max_hold_ms = 1.5")).0,
        "`max_hold_ms` must be an integer: a literal such as `max_hold_ms = 600_000`, or a constant or expression of type `u64`"
    );
}

#[test]
fn min_hold_longer_than_a_lease_that_is_not_renewed() {
    for (args, min_hold, ttl) in [
        (
            "ttl_ms = 10_000, renew = false, min_hold_ms = 10_001",
            "10_001",
            "10_000",
        ),
        (
            "min_hold_ms = 60000, renew = false",
            "60_000",
            "30_000, the default",
        ),
    ] {
        assert_eq!(
            error(&on_valid_fn(&format!("key = \"a:{{id}}\", {args}"))),
            (
                format!(
                    "`min_hold_ms` ({min_hold}) is longer than `ttl_ms` ({ttl}) with `renew = false`: the lease ends before the minimum hold; raise `ttl_ms` or turn renewal on"
                ),
                "min_hold_ms".to_owned()
            )
        );
    }
}

#[test]
fn max_hold_below_the_lease() {
    for (args, max_hold, ttl) in [
        ("ttl_ms = 10_000, max_hold_ms = 9_999", "9_999", "10_000"),
        ("max_hold_ms = 1000", "1_000", "30_000, the default"),
    ] {
        assert_eq!(
            error(&on_valid_fn(&format!("key = \"a:{{id}}\", {args}"))),
            (
                format!(
                    "`max_hold_ms` ({max_hold}) is below `ttl_ms` ({ttl}): the first lease already lasts longer; raise `max_hold_ms` or lower `ttl_ms`"
                ),
                "max_hold_ms".to_owned()
            )
        );
    }
}

#[test]
fn max_hold_without_renewal() {
    // Also below the lease: removing `max_hold_ms` fixes both, so one error.
    for args in [
        "renew = false, max_hold_ms = 60_000",
        "max_hold_ms = 1_000, renew = false",
    ] {
        assert_eq!(
            error(&on_valid_fn(&format!("key = \"a:{{id}}\", {args}"))),
            (
                "`max_hold_ms` bounds renewal, and `renew = false` turns renewal off; remove one of them".to_owned(),
                "max_hold_ms".to_owned()
            )
        );
    }
}

#[test]
fn hold_bounds_are_not_compared_with_a_rejected_ttl() {
    // Against the default 30_000, each of these would be a second error.
    for hold_bound in ["max_hold_ms = 1_000", "renew = false, min_hold_ms = 40_000"] {
        let (message, at) = error(&on_valid_fn(&format!(
            "key = \"a:{{id}}\", ttl_ms = 0, {hold_bound}"
        )));
        assert!(
            message.starts_with("`ttl_ms` must be greater than 0"),
            "{message}"
        );
        assert_eq!(at, "0");
    }
}

#[test]
fn retry_with_give_up() {
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", retry = 3, action = GiveUp")),
        (
            "`retry` has no effect with `action = GiveUp` (one attempt, then fail); remove `retry` or use `action = Continue`".to_owned(),
            "retry".to_owned()
        )
    );
}

#[test]
fn wait_with_give_up() {
    // Also shorter than `sleep_ms`: removing `wait_ms` fixes both, so one error.
    for args in [
        "wait_ms = 5_000, action = GiveUp",
        "action = GiveUp, sleep_ms = 1_000, wait_ms = 500",
    ] {
        assert_eq!(
            error(&on_valid_fn(&format!("key = \"a:{{id}}\", {args}"))),
            (
                "`wait_ms` has no effect with `action = GiveUp` (one attempt, then fail); remove `wait_ms` or use `action = Continue`".to_owned(),
                "wait_ms".to_owned()
            )
        );
    }
}

#[test]
fn fair_with_give_up() {
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", action = GiveUp, fair = true")),
        (
            "`fair = true` has no effect with `action = GiveUp`: a request that never waits never queues; remove `fair` or use `action = Continue`".to_owned(),
            "fair".to_owned()
        )
    );
}

#[test]
fn every_argument_without_effect_with_give_up_is_reported() {
    let errors = errors(&on_valid_fn(
        "key = \"a:{id}\", fair = true, wait_ms = 1_000, retry = 2, action = GiveUp",
    ));
    let reported: Vec<_> = errors.iter().map(|error| error.at.as_str()).collect();
    assert_eq!(reported, ["retry", "wait_ms", "fair"]);
}

#[test]
fn wait_shorter_than_sleep() {
    assert_eq!(
        error(&on_valid_fn(
            "key = \"a:{id}\", wait_ms = 1500, sleep_ms = 2_000"
        )),
        (
            "`wait_ms` (1_500) is shorter than `sleep_ms` (2_000): the first pause already outlasts the whole wait; raise `wait_ms` or lower `sleep_ms`".to_owned(),
            "wait_ms".to_owned()
        )
    );
}

#[test]
fn wait_is_not_compared_with_a_rejected_sleep() {
    let (message, at) = error(&on_valid_fn(
        "key = \"a:{id}\", sleep_ms = 100_000_000, wait_ms = 1_000",
    ));
    assert!(
        message.starts_with("`sleep_ms` must be at most"),
        "{message}"
    );
    assert_eq!(at, "100_000_000");
}

#[test]
fn bad_crate_path() {
    let message = "`crate` must be the path of the fencelock crate, e.g. `crate = \"my_locks\"` or `crate = my_locks`";
    for value in ["\"my locks\"", "5", "\"\"", "a::<T>"] {
        assert_eq!(
            error(&on_valid_fn(&format!(
                "key = \"a:{{id}}\", crate = {value}"
            ))),
            (message.to_owned(), value.to_owned())
        );
    }
}

#[test]
fn template_errors_point_into_the_literal() {
    for (template, at, message) in [
        (
            "",
            "\"\"",
            "the key template is empty; write the lock key, e.g. `key = \"order:{id}\"`",
        ),
        (
            "a:{id",
            "{id",
            "unclosed `{` in `{id`; close the placeholder with `}`, or write `{{` for a literal brace",
        ),
        (
            "a:}",
            "}",
            "unmatched `}` at the end of `a:}`; write `}}` for a literal brace",
        ),
        (
            "a:{}",
            "{}",
            "empty placeholder `{}`; name a function argument, e.g. `{id}`, or write `{{}}` for literal braces",
        ),
        (
            "a:{id:x}",
            "{id:x}",
            "invalid placeholder `{id:x}`; write an argument name, optionally followed by fields, e.g. `{id}`, `{order.id}` or `{self.id}` (no spaces or format specs)",
        ),
        (
            "{id}-{id}",
            "{id}-{id}",
            "placeholders `{id}` and `{id}` must be separated by literal text containing `:` (e.g. `{id}:{id}`): argument values have `:` escaped, so only a `:` keeps distinct arguments from forming the same key",
        ),
    ] {
        assert_eq!(
            error(&on_valid_fn(&format!("key = \"{template}\""))),
            (message.to_owned(), at.to_owned()),
            "{template}"
        );
    }
}

#[test]
fn every_template_error_is_reported() {
    let errors = errors(&on_valid_fn("key = \"}:{}:{x}:{id\""));
    let reported: Vec<_> = errors.iter().map(|error| error.at.as_str()).collect();
    // `{x}` names no argument, but that is only checked once the template parses.
    assert_eq!(reported, ["}", "{}", "{id"]);
}

#[test]
fn unknown_placeholder() {
    let source = "#[redis_lock(key = \"user:{self.id}:{user}:{amount.cents}\")] async fn f(&self, name: &str, _: u8, mut r#type: u32) -> Result<(), E> {}";
    let errors = errors(source);
    let reported: Vec<_> = errors
        .iter()
        .map(|error| (error.message.as_str(), error.at.as_str()))
        .collect();
    assert_eq!(
        reported,
        [
            (
                "no argument named `user` in this function; its arguments are: self, name, type; if `user` is a field of `self`, write `{self.user}`",
                "{user}"
            ),
            (
                "no argument named `amount` in this function; its arguments are: self, name, type; if `amount` is a field of `self`, write `{self.amount}`",
                "{amount.cents}"
            ),
        ]
    );
}

#[test]
fn placeholder_in_a_function_without_arguments() {
    assert_eq!(
        error("#[redis_lock(key = \"a:{self}\")] async fn f() -> Result<(), E> {}").0,
        "no argument named `self` in this function; it has no named arguments"
    );
}

#[test]
fn placeholder_naming_a_destructured_binding() {
    assert_eq!(
        error("#[redis_lock(key = \"a:{id}\")] async fn f(Order { id, .. }: Order, n: u8) -> Result<(), E> {}").0,
        "no argument named `id` in this function; its arguments are: n (a destructured argument has no name: bind it to a name and destructure it in the body)"
    );
}

#[test]
fn escaped_or_raw_templates() {
    // With escapes, value offsets do not match the source: the whole literal.
    assert_eq!(
        error(&on_valid_fn("key = \"a\\x3a{x}\"")).1,
        "\"a\\x3a{x}\""
    );
    // Raw strings map exactly.
    assert_eq!(error(&on_valid_fn("key = r#\"a:\"{x}\"#")).1, "{x}");
}

#[test]
fn not_async() {
    assert_eq!(
        error("#[redis_lock(key = \"a:{id}\")] pub fn f(id: u64) -> Result<(), E> { Ok(()) }"),
        (
            "`#[redis_lock]` can only be used on an `async fn`".to_owned(),
            "fn".to_owned()
        )
    );
}

#[test]
fn async_trait_output() {
    let source = "#[redis_lock(key = \"a:{id}\")] fn f<'life0, 'async_trait>(&'life0 self, id: u64) -> ::core::pin::Pin<Box<dyn ::core::future::Future<Output = Result<(), E>> + ::core::marker::Send + 'async_trait>> where 'life0: 'async_trait, Self: 'async_trait { Box::pin(async move { let __self = self; Ok(()) }) }";
    assert_eq!(
        error(source),
        (
            "`#[redis_lock]` sees the output of `#[async_trait]`, which expands first; use a native `async fn` in the trait (Rust 1.75+), or put `#[redis_lock]` on an inherent `async fn` that the trait method calls".to_owned(),
            "fn".to_owned()
        )
    );
}

#[test]
fn const_fn() {
    assert_eq!(
        error("#[redis_lock(key = \"a:{id}\")] const fn f(id: u64) -> Result<(), E> { Ok(()) }"),
        (
            "`#[redis_lock]` cannot be used on a `const fn`; remove `const` and make the function `async`".to_owned(),
            "const".to_owned()
        )
    );
}

#[test]
fn extern_fn() {
    assert_eq!(
        error(
            "#[redis_lock(key = \"a:{id}\")] async extern \"C\" fn f(id: u64) -> Result<(), E> { Ok(()) }"
        ),
        (
            "`#[redis_lock]` cannot be used on an `extern` function; remove the `extern` ABI"
                .to_owned(),
            "extern \"C\"".to_owned()
        )
    );
}

#[test]
fn variadic_fn() {
    let errors = errors(
        "#[redis_lock(key = \"a:{id}\")] async unsafe extern \"C\" fn f(id: u64, args: ...) -> Result<(), E> { Ok(()) }",
    );
    let reported: Vec<_> = errors
        .iter()
        .map(|error| (error.message.as_str(), error.at.as_str()))
        .collect();
    assert_eq!(
        reported,
        [
            (
                "`#[redis_lock]` cannot be used on an `extern` function; remove the `extern` ABI",
                "extern \"C\""
            ),
            (
                "`#[redis_lock]` cannot be used on a C-variadic function; remove the `...` argument",
                "args: ..."
            ),
        ]
    );
}

#[test]
fn return_types_that_cannot_be_results() {
    let message = "`#[redis_lock]` functions must return `Result<T, E>` with `E: From<fencelock::LockError>`: the lock can fail (not acquired, backend unreachable) and that failure is returned as `Err`";
    for return_type in [
        "()",
        "(u32, E)",
        "&'static str",
        "impl Future<Output = Result<(), E>>",
        "!",
        "[u8; 4]",
        "dyn Error",
        "fn() -> u8",
    ] {
        assert_eq!(
            error(&format!(
                "#[redis_lock(key = \"a:{{id}}\")] async fn f(id: u64) -> {return_type} {{}}"
            )),
            (message.to_owned(), return_type.to_owned())
        );
    }
    assert_eq!(
        error("#[redis_lock(key = \"a:{id}\")] async fn f(id: u64) {}"),
        (message.to_owned(), "async fn f(id: u64)".to_owned())
    );
}

/// Expands `source` and asserts that no error was reported.
fn expands_cleanly(source: &str) -> String {
    let (attr, item) = split_attribute(source);
    let output = expand::redis_lock(attr, item).to_string();
    assert!(!output.contains("compile_error"), "{source}: {output}");
    output
}

#[test]
fn return_type_paths_are_left_to_the_runtime() {
    for return_type in [
        "Result<u32, E>",
        "AppResult<T>",
        "anyhow::Result<()>",
        "std::io::Result<Vec<u8>>",
        "Option<u32>",
        "(Result<u8, E>)",
        "result!()",
    ] {
        expands_cleanly(&format!(
            "#[redis_lock(key = \"a:{{id}}\")] async fn f(id: u64) -> {return_type} {{}}"
        ));
    }
}

#[test]
fn accepted_arguments() {
    for args in [
        "key = \"a:{id}\",",
        "key = \"a:{id}\", ttl_ms = 10_000u64, retry = 5u32, sleep_ms = 1",
        "key = \"a:{id}\", ttl_ms = 86_400_000, sleep_ms = 86_400_000, retry = 0",
        "key = \"a:{id}\", retry = 3, action = Continue",
        "key = \"a:{id}\", action = GiveUp, ttl_ms = 1",
        "key = \"a:{id}\", crate = ::fencelock, client = CLIENT.clone()",
        "key = \"a:{id}\", renew = true, on_lost = Abort, min_hold_ms = 86_400_000, max_hold_ms = 30_000",
        "key = \"a:{id}\", renew = false, on_lost = Continue, ttl_ms = 1_000, min_hold_ms = 1_000",
        "key = \"a:{id}\", ttl_ms = 1_000, min_hold_ms = 5_000, max_hold_ms = 100_000_000_000u64",
        // Below the default pause is allowed: only two written numbers contradict.
        "key = \"a:{id}\", wait_ms = 1, fair = true",
        "key = \"a:{id}\", wait_ms = 86_400_000u64, sleep_ms = 86_400_000, retry = 3",
        "key = \"a:{id}\", sleep_ms = 500, wait_ms = 500, action = Continue, fair = false",
        "key = \"a:{id}\", action = GiveUp, fair = false",
        "crate = \"::my::locks\", client = &state.locks, key = \"{{a}}:{id}\"",
        "key = \"a:{id}\", ttl_ms = TTL, options = BASE",
        // Every kind takes every other argument.
        "key = \"a:{id}\", mode = Read, fair = true, min_replicas = 1, wait_ms = 1_000",
        "key = \"a:{id}\", mode = Write, action = GiveUp, on_lost = Continue",
        "key = \"a:{id}\", permits = 1, min_hold_ms = 5_000, options = BASE",
        "key = \"a:{id}\", permits = 1_024u32, renew = false, max_hold_ms = MAX",
        "key = \"a:{id}\", shards = 1, fair = true, retry = 0",
        "key = \"a:{id}\", shards = 1_024, action = GiveUp",
        // A count that is no literal is the runtime's to check.
        "key = \"a:{id}\", permits = PERMITS",
        "key = \"a:{id}\", shards = config.shards * 2",
        // `mode = Write` is not the default mutex: no conflict with another kind either.
        "key = \"a:{id}\", mode = r#Write",
    ] {
        expands_cleanly(&on_valid_fn(args));
    }
}

#[test]
fn key_template_without_its_name() {
    for args in ["\"a:{id}\"", "\"a:{id}\", ttl_ms = 5"] {
        assert_eq!(
            error(&on_valid_fn(args)),
            (
                "the key template needs its name: write `key = \"a:{id}\"`".to_owned(),
                "\"a:{id}\"".to_owned()
            ),
            "{args}"
        );
    }
}

#[test]
fn names_from_other_libraries_and_typos_get_a_suggestion() {
    for (written, meant) in [
        ("lease_time", "ttl_ms"),
        ("leaseTime", "ttl_ms"),
        ("waitTime", "wait_ms"),
        ("retyr", "retry"),
        ("sleep_sm", "sleep_ms"),
        ("min_slaves", "min_replicas"),
        ("permit", "permits"),
        ("segments", "shards"),
        ("kind", "mode"),
    ] {
        let (message, at) = error(&on_valid_fn(&format!("key = \"a:{{id}}\", {written} = 5")));
        assert!(
            message.starts_with(&format!(
                "unknown argument `{written}`; did you mean `{meant}`? expected one of:"
            )),
            "{message}"
        );
        assert_eq!(at, written);
    }
    let (message, _) = error(&on_valid_fn("key = \"a:{id}\", queue = 5"));
    assert!(!message.contains("did you mean"), "{message}");
}

#[test]
fn misspelled_placeholder_gets_a_suggestion() {
    assert_eq!(
        error("#[redis_lock(key = \"order:{order_di}\")] async fn f(order_id: u64) -> Result<(), E> {}"),
        (
            "no argument named `order_di` in this function; its arguments are: order_id; did you mean `{order_id}`?".to_owned(),
            "{order_di}".to_owned()
        )
    );
}

#[test]
fn expressions_are_checked_at_run_time_and_literals_still_here() {
    for args in [
        "key = \"a:{id}\", ttl_ms = TTL_MS, retry = config.retries, sleep_ms = 2 * PAUSE",
        // The lease is not known here: the runtime compares it with `max_hold_ms`.
        "key = \"a:{id}\", ttl_ms = TTL_MS, max_hold_ms = 1",
        // Neither is anything `options` sets.
        "key = \"a:{id}\", options = BASE, max_hold_ms = 1, min_hold_ms = 5",
        "key = \"a:{id}\", options = LockOptions::new().renew(false), wait_ms = 1",
    ] {
        expands_cleanly(&on_valid_fn(args));
    }
    let reported = |args: &str| {
        errors(&on_valid_fn(args))
            .into_iter()
            .map(|error| error.at)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        reported("key = \"a:{id}\", options = BASE, ttl_ms = 0, action = GiveUp, retry = 2"),
        ["0", "retry"]
    );
    assert_eq!(
        reported("key = \"a:{id}\", options = BASE, ttl_ms = 5_000, max_hold_ms = 1_000"),
        ["max_hold_ms"]
    );
}

#[test]
fn raw_identifier_arguments() {
    let output = expands_cleanly(
        "#[redis_lock(key = \"kind:{type}\")] async fn f(r#type: &str) -> Result<(), E> {}",
    );
    assert!(output.contains("value (& r#type)"), "{output}");
}

#[test]
fn not_a_function() {
    assert_eq!(
        error("#[redis_lock(key = \"a\")] pub struct Stock;"),
        (
            "`#[redis_lock]` can only be used on an `async fn`".to_owned(),
            "struct".to_owned()
        )
    );
}

#[test]
fn trait_declaration_without_body() {
    assert_eq!(
        error("#[redis_lock(key = \"a:{id}\")] async fn f(&self, id: u64) -> Result<(), E>;"),
        (
            "`#[redis_lock]` needs the function body; put it on the `async fn` in the `impl`, not on the trait's declaration".to_owned(),
            ";".to_owned()
        )
    );
}

#[test]
fn errors_of_every_stage_are_reported_together() {
    let errors = errors(
        "#[redis_lock(key = \"a:{nope}\", ttl = 1, ttl_ms = 0, action = GiveUp, retry = 2)] fn f(id: u64) -> Result<(), E> { Ok(()) }",
    );
    let reported: Vec<_> = errors.iter().map(|error| error.at.as_str()).collect();
    assert_eq!(reported, ["ttl", "0", "fn", "{nope}", "retry"]);
}

#[test]
fn body_syntax_is_left_to_rustc() {
    let source = "#[redis_lock(key = \"a:{id}\")] async fn f(id: u64) -> Result<(), E> { let = ; }";
    let (attr, item) = split_attribute(source);
    let output = expand::redis_lock(attr, item).to_string();
    assert!(!output.contains("compile_error"), "{output}");
    assert!(output.contains("let = ;"), "{output}");
}

#[test]
fn placeholders_of_two_arguments_without_a_colon_between_them() {
    for (template, at) in [("pair:{a}{b}", "{a}{b}"), ("pair:{a}-{b}", "{a}-{b}")] {
        assert_eq!(
            error(&format!(
                "#[redis_lock(key = \"{template}\")] async fn f(a: u32, b: u32) -> Result<(), E> {{}}"
            )),
            (
                "placeholders `{a}` and `{b}` must be separated by literal text containing `:` (e.g. `{a}:{b}`): argument values have `:` escaped, so only a `:` keeps distinct arguments from forming the same key".to_owned(),
                at.to_owned()
            ),
            "{template}"
        );
    }
}

#[test]
fn unknown_mode() {
    for (value, message) in [
        (
            "Raed",
            "unknown mode `Raed`; did you mean `Read`? expected `Read` or `Write`",
        ),
        (
            "write",
            "unknown mode `write`; did you mean `Write`? expected `Read` or `Write`",
        ),
        (
            "\"read\"",
            "unknown mode `\"read\"`; did you mean `Read`? expected `Read` or `Write`",
        ),
        (
            "Exclusive",
            "unknown mode `Exclusive`; expected `Read` or `Write`",
        ),
        (
            "LockKind::Read",
            "unknown mode `LockKind :: Read`; expected `Read` or `Write`",
        ),
        ("1", "unknown mode `1`; expected `Read` or `Write`"),
    ] {
        assert_eq!(
            error(&on_valid_fn(&format!("key = \"a:{{id}}\", mode = {value}"))),
            (message.to_owned(), value.to_owned())
        );
    }
    assert_eq!(
        error(&on_valid_fn("key = \"a:{id}\", mode")),
        (
            "`mode` needs a value, e.g. `mode = Read`".to_owned(),
            "mode".to_owned()
        )
    );
}

#[test]
fn counts_out_of_range() {
    for (args, message, at) in [
        (
            "permits = 0",
            "`permits` must be at least 1: a semaphore without permits lets nobody in",
            "0",
        ),
        (
            "permits = 1_025",
            "`permits` must be at most 1_024, the most accepted; use a smaller value",
            "1_025",
        ),
        (
            "shards = 0",
            "`shards` must be at least 1: a segmented lock without shards has nothing to lock",
            "0",
        ),
        (
            "shards = 1_025",
            "`shards` must be at most 1_024, the most accepted; use a smaller value",
            "1_025",
        ),
        (
            "shards = 99999999999999999999999",
            "`shards` must be at most 1_024, the most accepted; use a smaller value",
            "99999999999999999999999",
        ),
        (
            "permits = -2",
            "`permits` must be at least 1: a semaphore without permits lets nobody in",
            "-2",
        ),
    ] {
        assert_eq!(
            error(&on_valid_fn(&format!("key = \"a:{{id}}\", {args}"))),
            (message.to_owned(), at.to_owned()),
            "{args}"
        );
    }
}

#[test]
fn counts_that_are_no_integers() {
    for (args, message, at) in [
        (
            "permits = \"3\"",
            "`permits` must be an integer: a literal such as `permits = 5`, or a constant or expression of type `u32`",
            "\"3\"",
        ),
        (
            "shards = 2.5",
            "`shards` must be an integer: a literal such as `shards = 16`, or a constant or expression of type `u32`",
            "2.5",
        ),
        (
            "shards = 16u64",
            "`shards` takes a plain integer; remove the suffix `u64`",
            "16u64",
        ),
        (
            "permits",
            "`permits` needs a value, e.g. `permits = 5`",
            "permits",
        ),
    ] {
        assert_eq!(
            error(&on_valid_fn(&format!("key = \"a:{{id}}\", {args}"))),
            (message.to_owned(), at.to_owned()),
            "{args}"
        );
    }
}

#[test]
fn two_lock_kinds() {
    for (args, message, at) in [
        (
            "mode = Read, permits = 3",
            "`mode` asks for a read lock and `permits` for a semaphore: a lock has one kind; remove `mode` or `permits`",
            "permits",
        ),
        (
            "shards = 16, mode = Write",
            "`shards` asks for a segmented lock and `mode` for a write lock: a lock has one kind; remove `shards` or `mode`",
            "mode",
        ),
        (
            "permits = 3, shards = 16",
            "`permits` asks for a semaphore and `shards` for a segmented lock: a lock has one kind; remove `permits` or `shards`",
            "shards",
        ),
        // A count written as an expression conflicts all the same.
        (
            "shards = SHARDS, permits = PERMITS",
            "`shards` asks for a segmented lock and `permits` for a semaphore: a lock has one kind; remove `shards` or `permits`",
            "permits",
        ),
    ] {
        let source = on_valid_fn(&format!("key = \"a:{{id}}\", {args}"));
        let errors = errors(&source);
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert_eq!(
            (errors[0].message.as_str(), errors[0].at.as_str()),
            (message, at)
        );
        assert_eq!(errors[0].offset, source.rfind(at).unwrap(), "{args}");
    }
}

#[test]
fn every_kind_after_the_first_is_reported() {
    let errors = errors(&on_valid_fn(
        "permits = 3, key = \"a:{id}\", mode = Read, shards = 4",
    ));
    let reported: Vec<_> = errors
        .iter()
        .map(|error| (error.message.as_str(), error.at.as_str()))
        .collect();
    assert_eq!(
        reported,
        [
            (
                "`permits` asks for a semaphore and `mode` for a read lock: a lock has one kind; remove `permits` or `mode`",
                "mode"
            ),
            (
                "`permits` asks for a semaphore and `shards` for a segmented lock: a lock has one kind; remove `permits` or `shards`",
                "shards"
            ),
        ]
    );
}

#[test]
fn a_rejected_kind_is_not_also_a_conflict() {
    // The value's own error says what to fix; the conflict shows once it is fixed.
    for (args, at) in [
        ("mode = Raed, permits = 3", "Raed"),
        ("permits = 0, shards = 16", "0"),
    ] {
        assert_eq!(
            error(&on_valid_fn(&format!("key = \"a:{{id}}\", {args}"))).1,
            at
        );
    }
}

/// Review finding: a template whose fixed text could never make a valid key compiled, and
/// every call failed at run time.
#[test]
fn a_key_text_too_long_or_with_control_characters() {
    let long = "k".repeat(1_025);
    let (message, at) = error(&format!(
        "#[redis_lock(key = \"{long}:{{id}}\")] async fn f(id: u64) -> Result<(), E> {{}}"
    ));
    assert!(
        message.starts_with(
            "a lock key is at most 1024 bytes and this template's text alone has 1026"
        ),
        "{message}"
    );
    assert_eq!(at, format!("\"{long}:{{id}}\""));
    let (message, at) =
        error("#[redis_lock(key = \"a\\nb:{id}\")] async fn f(id: u64) -> Result<(), E> {}");
    assert_eq!(
        message,
        "lock keys must not contain control characters, found '\\n'; write the key without it"
    );
    assert_eq!(at, "\"a\\nb:{id}\"");
}

/// Review finding: `keys` with two kind arguments also reported that the two conflict; each
/// is reported once, as not combining with `keys`.
#[test]
fn keys_with_two_kinds_reports_each_once() {
    let errors = errors(
        "#[redis_lock(keys = [\"a:{x}\", \"b:{y}\"], shards = 4, mode = Read)] \
         async fn f(x: u64, y: u64) -> Result<(), E> {}",
    );
    let reported: Vec<_> = errors.iter().map(|error| error.at.as_str()).collect();
    assert_eq!(reported, ["mode", "shards"], "{errors:#?}");
}
