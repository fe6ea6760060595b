//! `key=value,...` settings of numbers (`--msc`, `--gpu-weights`): one parser, each error naming
//! the entry.

use crate::error::Error;

/// The `key = number` pairs of `s`, each key one of `keys` and given once, each value a finite
/// number ≥ 0, in the order written.
pub fn parse_numbers(s: &str, keys: &'static [&'static str]) -> Result<Vec<(&'static str, f64)>, Error> {
    let mut given: Vec<(&'static str, f64)> = Vec::new();
    for entry in s.split(',') {
        let entry = entry.trim();
        let Some((key, value)) = entry.split_once('=') else {
            return Err(Error::MscSyntax { entry: entry.chars().take(64).collect(), keys });
        };
        let (key, value) = (key.trim(), value.trim());
        let Some(&name) = keys.iter().find(|k| **k == key) else {
            return Err(Error::MscUnknownKey { key: key.chars().take(64).collect(), keys });
        };
        if given.iter().any(|(k, _)| *k == name) {
            return Err(Error::MscDuplicate(name.to_string()));
        }
        let v: f64 = value
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| Error::NotACost { key: name, value: value.chars().take(64).collect() })?;
        given.push((name, v));
    }
    Ok(given)
}
