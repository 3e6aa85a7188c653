impl Report {
    async fn render(self, state: &AppState) -> Result<impl Display + use<>, LockError> {
        let __fencelock_client = my_locks::reexport::__private::client_of(
            &(&state.locks),
        );
        let __fencelock_key = my_locks::reexport::__private::render_key(
            &[
                my_locks::reexport::__private::KeyPart::Text("report:"),
                my_locks::reexport::__private::KeyPart::value(&self),
            ],
        );
        let __fencelock_options = my_locks::reexport::__private::LockOptions::new()
            .name("report:{self}");
        let __fencelock_ending = my_locks::reexport::__private::ReleaseInBackground;
        __fencelock_ending
            .run_locked(
                __fencelock_client,
                __fencelock_key,
                my_locks::reexport::__private::LockKind::Mutex,
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
                        let __fencelock_fake_return: Result<_, LockError> = loop {};
                        return __fencelock_fake_return;
                    }
                    { Ok(self.title) }
                },
            )
            .await
    }
}
