"""Search: the stored images nearest a query image (embedded by the export) or a stored key."""
