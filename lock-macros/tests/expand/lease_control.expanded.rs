async fn nightly_report(day: Date) -> Result<(), JobError> {
    let __fencelock_client = ::fencelock::__private::scoped_client();
    let __fencelock_key = ::fencelock::__private::render_key(
        &[
            ::fencelock::__private::KeyPart::Text("report:"),
            ::fencelock::__private::KeyPart::Value(&day),
        ],
    );
    let __fencelock_options = ::fencelock::__private::LockOptions::new()
        .ttl_ms(10000)
        .give_up()
        .renew(true)
        .on_lost(::fencelock::__private::OnLost::Continue)
        .min_hold_ms(60000)
        .max_hold_ms(3600000);
    ::fencelock::__private::run_locked(
            __fencelock_client,
            __fencelock_key,
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
                    let __fencelock_fake_return: Result<(), JobError> = loop {};
                    return __fencelock_fake_return;
                }
                { build_report(day).await }
            },
        )
        .await
}
