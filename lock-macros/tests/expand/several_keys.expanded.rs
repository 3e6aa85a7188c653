/// Moves `amount` from one account to another.
///
/// Runs while holding the distributed locks `acct:{from}` and `acct:{to}`, together (`#[redis_lock]`, lease 30_000 ms).
async fn transfer(from: u64, to: u64, amount: u64) -> Result<(), BankError> {
    let __fencelock_client = ::fencelock::__private::scoped_client();
    let __fencelock_key = ::fencelock::__private::render_keys([
        ::fencelock::__private::render_key(
            &[
                ::fencelock::__private::KeyPart::Text("acct:"),
                ::fencelock::__private::KeyPart::value(&from),
            ],
        ),
        ::fencelock::__private::render_key(
            &[
                ::fencelock::__private::KeyPart::Text("acct:"),
                ::fencelock::__private::KeyPart::value(&to),
            ],
        ),
    ]);
    let __fencelock_options = ::fencelock::__private::LockOptions::new()
        .name("acct:{from}, acct:{to}")
        .wait_ms(5000);
    let __fencelock_ending = {
        use ::fencelock::__private::{AwaitsRelease as _, ReleasesInBackground as _};
        (&&::fencelock::__private::Ending::<Result<(), BankError>>::new()).ending()
    };
    __fencelock_ending
        .run_locked(
            __fencelock_client,
            __fencelock_key,
            ::fencelock::__private::LockKind::Mutex,
            __fencelock_options,
            async move {
                #[allow(
                    unknown_lints,
                    unreachable_code,
                    clippy::diverging_sub_expression,
                    clippy::empty_loop,
                    clippy::let_unit_value,
                    clippy::unreachable,
                    clippy::needless_return
                )]
                if false {
                    let __fencelock_fake_return: Result<(), BankError> = loop {};
                    return __fencelock_fake_return;
                }
                { ledger::transfer(from, to, amount, current_tokens()).await }
            },
        )
        .await
}
