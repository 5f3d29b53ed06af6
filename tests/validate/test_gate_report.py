"""Gate report tests (unit level, for mutation testing): filled in below."""
