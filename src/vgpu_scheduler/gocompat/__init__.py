"""What Go does that the HAMi formats depend on: `time.ParseDuration` and `Duration.String()`
(`durations`), `time.Parse(time.RFC3339, ...)` (`gotime`), `strconv` parsing and `json.Marshal`
output (`parsing`). Ground floor: imported by the wire formats, the flags and the cluster layer."""
