/// Exports a report; three at most at once.
///
/// Runs while holding one of 3 permits of the distributed semaphore `exports` (`#[redis_lock]`, lease 30_000 ms).
async fn export(report: Report) -> Result<(), AppError> {
    let __fencelock_client = ::fencelock::__private::scoped_client();
    let __fencelock_key = ::fencelock::__private::render_key(
        &[::fencelock::__private::KeyPart::Text("exports")],
    );
    let __fencelock_options = ::fencelock::__private::LockOptions::new().name("exports");
    let __fencelock_ending = {
        use ::fencelock::__private::{AwaitsRelease as _, ReleasesInBackground as _};
        (&&::fencelock::__private::Ending::<Result<(), AppError>>::new()).ending()
    };
    __fencelock_ending
        .run_locked(
            __fencelock_client,
            __fencelock_key,
            ::fencelock::__private::LockKind::Semaphore {
                permits: 3,
            },
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
                    let __fencelock_fake_return: Result<(), AppError> = loop {};
                    return __fencelock_fake_return;
                }
                { report.write().await }
            },
        )
        .await
}
