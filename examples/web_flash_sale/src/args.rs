//! Command-line flags: `--name value` and `--switch`, checked against what a subcommand takes.

use std::collections::HashMap;
use std::str::FromStr;

/// The flags given to one subcommand.
pub struct Flags {
    values: HashMap<String, String>,
    switches: Vec<String>,
}

impl Flags {
    /// Parses `args`, accepting only the flags named in `valued` (which take a value) and
    /// `switches` (which take none).
    pub fn parse(args: &[String], valued: &[&str], switches: &[&str]) -> Result<Flags, String> {
        let mut flags = Flags {
            values: HashMap::new(),
            switches: Vec::new(),
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let name = arg
                .strip_prefix("--")
                .ok_or_else(|| format!("unexpected argument `{arg}`: flags start with `--`"))?;
            if switches.contains(&name) {
                flags.switches.push(name.to_owned());
            } else if valued.contains(&name) {
                let value = args
                    .next()
                    .ok_or_else(|| format!("`--{name}` needs a value: `--{name} VALUE`"))?;
                flags.values.insert(name.to_owned(), value.clone());
            } else {
                let known: Vec<String> = valued
                    .iter()
                    .chain(switches)
                    .map(|flag| format!("--{flag}"))
                    .collect();
                return Err(format!(
                    "unknown flag `{arg}`; this command takes {}",
                    known.join(", ")
                ));
            }
        }
        Ok(flags)
    }

    /// Whether the switch `--name` was given.
    pub fn switch(&self, name: &str) -> bool {
        self.switches.iter().any(|given| given == name)
    }

    /// The value of `--name`, which must be given.
    pub fn required<T: FromStr>(&self, name: &str) -> Result<T, String> {
        let value = self
            .values
            .get(name)
            .ok_or_else(|| format!("`--{name}` is required"))?;
        parse_value(name, value)
    }
}

fn parse_value<T: FromStr>(name: &str, value: &str) -> Result<T, String> {
    value.parse().map_err(|_| {
        format!(
            "`--{name} {value}`: expected a {}",
            std::any::type_name::<T>()
        )
    })
}
