# Receipts, status processing and tenant webhooks arrive with the return-path issue.
