/// The day's report, computed once however many ask for it at the same time.
///
/// Runs while holding the distributed lock `report:{day}` (`#[redis_lock]`, lease 30_000 ms, single-flight: calls that overlap share one computation).
async fn report(day: u32) -> Result<Report, ReportError> {
    let __fencelock_client = ::fencelock::__private::scoped_client();
    let __fencelock_key = ::fencelock::__private::render_key(
        &[
            ::fencelock::__private::KeyPart::Text("report:"),
            ::fencelock::__private::KeyPart::value(&day),
        ],
    );
    let __fencelock_options = ::fencelock::__private::LockOptions::new()
        .name("report:{day}")
        .wait_ms(30000);
    ::fencelock::__private::run_shared(
            __fencelock_client,
            __fencelock_key,
            __fencelock_options,
            ::core::concat!(
                ::core::module_path!(), "::", "report", "@", ::core::line!(), ":",
                ::core::column!()
            ),
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
                    let __fencelock_fake_return: Result<Report, ReportError> = loop {};
                    return __fencelock_fake_return;
                }
                { build_report(day).await }
            },
        )
        .await
}
