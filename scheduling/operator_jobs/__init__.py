"""What operators do in the console beyond one page: bulk cancel, reschedule and replay over any admin
filter, run in the background (docs/admin.md, "Bulk jobs"), and the record of who opened which message
(docs/admin.md, "Who looked")."""
