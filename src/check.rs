//! Checking configured values: the problems found, each with the key path it is about
//! (`channels[1].url`), in the order found. The config names the key's line from it.

/// A year in seconds: the longest duration any knob takes.
pub const YEAR: u64 = 365 * 86_400;

/// Problems found checking a config, in order.
#[derive(Default)]
pub struct Problems(pub Vec<(String, String)>);

impl Problems {
    pub fn add(&mut self, key: &str, msg: String) {
        self.0.push((key.to_string(), msg));
    }
    pub fn int(&mut self, key: &str, v: u64, min: u64, max: u64) {
        if v < min {
            self.add(key, format!("{v} is below {min}, the least it can be"));
        } else if v > max {
            self.add(key, format!("{v} is above {max}, the most it can be"));
        }
    }
    pub fn url(&mut self, key: &str, v: &str) {
        match url::Url::parse(v) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            Ok(u) => self.add(
                key,
                format!("{v:?} is not an http(s) URL (scheme {:?})", u.scheme()),
            ),
            Err(e) => self.add(key, format!("{v:?} is not a URL ({e})")),
        }
    }
}
