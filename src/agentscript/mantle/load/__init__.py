"""Reading a Mantle project: one reader per file, then the cross-file checks."""
