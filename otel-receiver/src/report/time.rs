/// `HH:MM:SS` (UTC) of a unix time: enough to line a report up with a job's logs.
pub fn utc_hms(t: f64) -> String {
    let secs = t.max(0.0) as u64 % 86_400;
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// The UTC date of a unix time, `YYYY-MM-DD`: what a shared page needs beside its times of
/// day. The proleptic Gregorian calendar from days since 1970 (Howard Hinnant's
/// `civil_from_days`), exact for every date a trace can hold.
pub fn utc_date(t: f64) -> String {
    let days = (t.max(0.0) / 86_400.0).floor() as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// "2026-11-30 07:48:27 UTC": a time of day with its date and zone.
pub fn utc_stamp(t: f64) -> String {
    format!("{} {} UTC", utc_date(t), utc_hms(t))
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_time_of_day_in_utc() {
        assert_eq!(super::utc_hms(1796024907.4), "07:48:27");
    }

    #[test]
    fn dates_fall_on_the_calendar() {
        assert_eq!(super::utc_date(0.0), "1970-01-01");
        assert_eq!(super::utc_date(1796024907.4), "2026-11-30");
        // A leap day, and the second before and after midnight.
        assert_eq!(super::utc_date(951_782_400.0), "2000-02-29");
        assert_eq!(super::utc_date(1_709_251_199.0), "2024-02-29");
        assert_eq!(super::utc_date(1_709_251_200.0), "2024-03-01");
        assert_eq!(super::utc_stamp(1796024907.4), "2026-11-30 07:48:27 UTC");
    }
}
