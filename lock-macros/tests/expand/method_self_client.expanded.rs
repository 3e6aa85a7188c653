impl Account {
    pub(crate) async fn transfer(
        &self,
        currency: Currency,
        amount: u64,
    ) -> Result<(), BankError> {
        #![allow(clippy::cast_possible_truncation)]
        let __fencelock_client = ::fencelock::__private::client_of(&(self.locks));
        let __fencelock_key = ::fencelock::__private::render_key(
            &[
                ::fencelock::__private::KeyPart::Text("account:"),
                ::fencelock::__private::KeyPart::value(&self.id),
                ::fencelock::__private::KeyPart::Text(":"),
                ::fencelock::__private::KeyPart::value(&currency),
            ],
        );
        let __fencelock_options = ::fencelock::__private::LockOptions::new()
            .name("account:{self.id}:{currency}")
            .retry(3)
            .sleep_ms(50);
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
                    {
                        self.ledger.debit(amount).await?;
                        Ok(())
                    }
                },
            )
            .await
    }
}
