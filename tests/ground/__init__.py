"""The ground floor (tether/*.py): keys, text splitting, redaction, cron expressions."""
