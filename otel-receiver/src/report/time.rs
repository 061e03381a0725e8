/// `HH:MM:SS` (UTC) of a unix time: enough to line a report up with a job's logs.
pub fn utc_hms(t: f64) -> String {
    let secs = t.max(0.0) as u64 % 86_400;
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_time_of_day_in_utc() {
        assert_eq!(super::utc_hms(1796024907.4), "07:48:27");
    }
}
