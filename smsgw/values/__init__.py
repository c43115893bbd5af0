"""Value rules every app may import: phone numbers (E.164, masking), SMS segments, timezones and local-time
resolution. Nothing here imports Django or another part of smsgw."""
