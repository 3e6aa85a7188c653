async fn nightly_report(day: Date) -> Result<(), JobError> {
    let __fencelock_client = ::fencelock::__private::scoped_client();
    let __fencelock_key = ::fencelock::__private::render_key(
        &[
            ::fencelock::__private::KeyPart::Text("report:"),
            ::fencelock::__private::KeyPart::value(&day),
        ],
    );
    let __fencelock_options = ::fencelock::__private::LockOptions::new()
        .name("report:{day}")
        .ttl_ms(10000)
        .action(::fencelock::__private::Action::GiveUp)
        .renew(true)
        .on_lost(::fencelock::__private::OnLost::Continue)
        .min_hold_ms(60000)
        .max_hold_ms(3600000);
    let __fencelock_ending = {
        use ::fencelock::__private::{AwaitsRelease as _, ReleasesInBackground as _};
        (&&::fencelock::__private::Ending::<Result<(), JobError>>::new()).ending()
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
                    let __fencelock_fake_return: Result<(), JobError> = loop {};
                    return __fencelock_fake_return;
                }
                { build_report(day).await }
            },
        )
        .await
}
