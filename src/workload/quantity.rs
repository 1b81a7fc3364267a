//! Kubernetes quantities ("500m", "0.5", "128Mi", "1e3") as exact numbers, so a desired
//! "0.5" CPU is recognised in the "500m" the API server stores.

/// The value in units of 10^-9, or `None` when `s` is not a quantity (or is finer than 1n,
/// or too large to hold exactly).
pub fn parse(s: &str) -> Option<i128> {
    let (negative, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(end);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return None;
    }
    // Mantissa and a power of ten: "12.5" is 125 * 10^-1.
    let digits = format!("{int}{frac}");
    if digits.len() > 30 {
        return None;
    }
    let mantissa: i128 = digits.parse().ok()?;
    let mut exp10 = -(frac.len() as i32);
    let mut factor: i128 = 1;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => factor = 1 << 10,
        "Mi" => factor = 1 << 20,
        "Gi" => factor = 1 << 30,
        "Ti" => factor = 1 << 40,
        "Pi" => factor = 1 << 50,
        "Ei" => factor = 1 << 60,
        e if e.starts_with(['e', 'E']) => {
            let n = &e[1..];
            let unsigned = n.strip_prefix(['+', '-']).unwrap_or(n);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            exp10 += n.parse::<i32>().ok()?;
        }
        _ => return None,
    }
    // To nano units: value = mantissa * factor * 10^(exp10 + 9).
    let shift = exp10.checked_add(9)?;
    let mut v = mantissa.checked_mul(factor)?;
    if shift >= 0 {
        v = v.checked_mul(10i128.checked_pow(u32::try_from(shift).ok()?)?)?;
    } else {
        let div = 10i128.checked_pow(u32::try_from(-shift).ok()?)?;
        if v % div != 0 {
            return None;
        }
        v /= div;
    }
    Some(if negative { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn equal_quantities_in_any_notation() {
        assert_eq!(parse("0.5"), parse("500m"));
        assert_eq!(parse("1"), parse("1000m"));
        assert_eq!(parse("1e3"), parse("1k"));
        assert_eq!(parse("1Ki"), parse("1024"));
        assert_eq!(parse("128Mi"), Some(128 * (1 << 20) * 1_000_000_000));
        assert_eq!(parse(".5"), parse("0.5"));
        assert_eq!(parse("-1"), Some(-1_000_000_000));
        assert_ne!(parse("128M"), parse("128Mi"));
    }

    #[test]
    fn not_quantities() {
        for s in [
            "",
            "abc",
            "1.2.3",
            "12x",
            "1e",
            "1e+",
            "m",
            ".",
            "nginx:1.27",
            "1n5",
        ] {
            assert_eq!(parse(s), None, "{s}");
        }
        assert_eq!(parse("0.1n"), None, "finer than 1n");
    }
}
